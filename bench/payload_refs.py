"""A large payload by reference against inline: ``python -m bench.payload_refs``.

On a durable throwaway PostgreSQL cluster (or ``--url``), one worker process per mode runs
``--tasks`` tasks, one after another, each with a payload of ``--mib`` MiB (a string in an
object); the handler reads the string's length. Modes:

* ``reference``: the payload above the inline limit (1 MiB) goes to a blob directory and the
  task's row carries its reference (``rdq.blobs``), as rdq does;
* ``inline``: the same payload in the row. rdq refuses a payload over 1 MiB inline, so for
  this mode alone the benchmark lifts that bound in both of its processes (the client and the
  worker): it measures what rdq would pay without references, not something a user can do.

For each mode it prints the worker's RSS (``/proc/PID/status``: ``VmRSS`` idle, ``VmHWM`` the
peak, ``VmRSS`` 3 s after the last task), and per task: the submit call, and from the submit's
return to the task's SUCCEEDED (claim, read back, handler, completion), p50 and max over the
tasks. Every task must succeed with the handler having seen every byte, else it fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

from bench._servers import postgres

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
LIFTED = 64 * MIB
"""The payload bound of the ``inline`` mode (rdq's is 1 MiB)."""

WORKER = textwrap.dedent(
    """
    import asyncio, sys
    import rdq
    from rdq.blobs import Blobs, DirectoryBlobStore

    url, queue, blob_dir, mode, size = sys.argv[1:6]
    if mode == "inline":
        import rdq.spi.bounds._fields as fields
        fields.MAX_PAYLOAD_BYTES = int(sys.argv[6])
    app = rdq.App(blobs=Blobs(store=DirectoryBlobStore(blob_dir)))
    app.queue(queue, max_attempts=1)

    @app.handler("take", queue=queue)
    async def take(payload):
        if len(payload["data"]) != int(size):
            raise rdq.Permanent("the payload came back short")

    async def main():
        async with rdq.open_storage(url) as storage:
            worker = rdq.Worker(app, storage, queues=[queue], poll_max=0.05, keys=None)
            await worker.run()

    asyncio.run(main())
    """
)


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


async def measure(url: str, mode: str, tasks: int, size: int) -> dict[str, float]:
    import rdq
    import rdq.spi.bounds._fields as fields
    from rdq.blobs import Blobs, DirectoryBlobStore
    from rdq.spi import PAYLOAD_REF_HEADER, Status, bounds

    limit = LIFTED if mode == "inline" else 1 * MIB
    fields.MAX_PAYLOAD_BYTES = bounds.MAX_PAYLOAD_BYTES = limit
    queue = f"big-{mode}-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="rdq-bench-blobs-") as blob_dir:
        blobs = Blobs(store=DirectoryBlobStore(blob_dir), inline_limit=limit, max_bytes=LIFTED)
        app = rdq.App(blobs=blobs)
        app.queue(queue, max_attempts=1)
        async with rdq.open_storage(url) as storage:
            await storage.migrate()
            worker = await asyncio.create_subprocess_exec(
                sys.executable, "-c", WORKER, url, queue, blob_dir, mode, str(size), str(LIFTED),
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip
            try:
                await asyncio.sleep(3.0)
                idle = status_kib(worker.pid, "VmRSS")
                client = rdq.Client(storage, app, keys=None)
                payload = {"data": "x" * size}
                submits: list[float] = []
                runs: list[float] = []
                for _ in range(tasks):
                    start = time.perf_counter()
                    sub = await client.submit("take", payload, queue=queue, check_handler=False)
                    submitted = time.perf_counter()
                    submits.append(submitted - start)
                    stored = await storage.get(sub.id)
                    assert (PAYLOAD_REF_HEADER in stored.headers) == (mode == "reference")
                    while (task := await storage.get(sub.id)).status not in (
                        Status.SUCCEEDED,
                        Status.DEAD,
                    ):
                        if time.perf_counter() - submitted > 120:
                            raise SystemExit(f"{mode}: task {sub.id} did not finish in 120 s")
                        await asyncio.sleep(0.01)
                    if task.status is not Status.SUCCEEDED:
                        raise SystemExit(f"{mode}: task {sub.id} is {task.status}")
                    runs.append(time.perf_counter() - submitted)
                await asyncio.sleep(3.0)
                return {
                    "idle": idle / 1024,
                    "peak": status_kib(worker.pid, "VmHWM") / 1024,
                    "after": status_kib(worker.pid, "VmRSS") / 1024,
                    "submit p50": statistics.median(submits) * 1000,
                    "submit max": max(submits) * 1000,
                    "run p50": statistics.median(runs) * 1000,
                    "run max": max(runs) * 1000,
                }
            finally:
                worker.terminate()
                await asyncio.wait_for(worker.wait(), 60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a PostgreSQL URL (default: a throwaway cluster)")
    parser.add_argument("--mib", type=int, default=10, help="the payload's size (MiB)")
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--modes", default="reference,inline")
    args = parser.parse_args()
    size = args.mib * MIB
    with postgres(args.url) as url:
        print(f"{args.tasks} tasks of {args.mib} MiB each, one at a time")
        print(
            f"{'mode':<10} {'idle MiB':>9} {'peak MiB':>9} {'after MiB':>10} "
            f"{'submit p50/max ms':>18} {'submit→done p50/max ms':>23}"
        )
        for mode in args.modes.split(","):
            got = asyncio.run(measure(url, mode, args.tasks, size))
            print(
                f"{mode:<10} {got['idle']:>9.1f} {got['peak']:>9.1f} {got['after']:>10.1f} "
                f"{got['submit p50']:>9.0f}/{got['submit max']:<8.0f} "
                f"{got['run p50']:>11.0f}/{got['run max']:<11.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
