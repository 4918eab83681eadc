"""Worker memory with large payloads in flight, as a user runs it: one ``rdq worker`` process
(``bench.memory.app``) on a durable throwaway PostgreSQL cluster, or ``--url``.

    python -m bench.memory --tasks 50 --size 1000000 --rounds 3

Each round submits ``--tasks`` tasks whose payload carries a string of ``--size`` characters;
the handler holds it for 2 s, so they are all in flight together. It prints the worker's RSS
(/proc/PID/status ``VmRSS``) idle before the first round, its peak (``VmHWM``), and 5 s
after each round's last task succeeded. Every task must succeed once, else it fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import rdq
from bench._servers import postgres
from rdq.spi import Page, Status, TaskFilter

ROOT = Path(__file__).resolve().parents[2]


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


async def succeeded(storage: rdq.spi.Storage) -> int:
    page, _ = await storage.list_tasks("big", TaskFilter(status=Status.SUCCEEDED), Page(limit=1000))
    return len(page)


async def run(url: str, app: str, tasks: int, size: int, rounds: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    async with rdq.open_storage(url) as storage:
        await storage.migrate()
        worker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rdq", "worker", app, "--storage", url,
            "--log-level", "WARNING",
            env=env,
            cwd=ROOT,
        )  # fmt: skip
        try:
            await asyncio.sleep(4.0)
            idle = status_kib(worker.pid, "VmRSS")
            print(f"idle: {mib(idle)}", flush=True)
            client = rdq.Client(storage)
            blob = "x" * size
            done = 0
            for number in range(1, rounds + 1):
                started = time.monotonic()
                batch = rdq.Submission("hold", {"blob": blob}, queue="big", check_handler=False)
                await client.submit_many([batch] * tasks)
                done += tasks
                while await succeeded(storage) < done:
                    if time.monotonic() - started > 120:
                        raise SystemExit("the tasks did not finish in 120 s")
                    await asyncio.sleep(0.2)
                await asyncio.sleep(5.0)
                print(
                    f"round {number}: peak {mib(status_kib(worker.pid, 'VmHWM'))}, "
                    f"5 s after {mib(status_kib(worker.pid, 'VmRSS'))}",
                    flush=True,
                )
        finally:
            worker.terminate()
            await asyncio.wait_for(worker.wait(), 60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--app", default="bench.memory.app:app", help="the worker's app")
    parser.add_argument("--url", help="a PostgreSQL URL (default: a throwaway cluster)")
    args = parser.parse_args()
    with postgres(args.url) as url:
        asyncio.run(run(url, args.app, args.tasks, args.size, args.rounds))


if __name__ == "__main__":
    main()
