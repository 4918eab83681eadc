"""The engine's own cost per task: ``rdq.Worker`` against a store that answers at once.

    python -m bench.engine                        # 20,000 tasks, 5 repetitions
    python -m bench.engine --tasks 2000 --repeat 1 --workers 8
    valgrind --tool=callgrind python -m bench.engine --tasks 2000 --repeat 1   # instructions

The store hands out prepared claims of an async no-op handler's tasks and records every
completion (``complete_many``, one per flush) without doing anything else, after one pass of
the event loop (as a real store yields to it while its round trip is out). What remains is the
engine's bookkeeping per task — a claim, a handler call under its timeout, an attempt record,
a batched completion, metrics — so changes to the per-task path can be compared by CPU time
(or, under valgrind, by instructions, which do not depend on what else the machine runs).
Every task must be completed exactly once, or the run fails.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import rdq
from rdq.spi import (
    Attempt,
    Capabilities,
    Claimed,
    Completion,
    Envelope,
    Outcome,
    Stats,
    Status,
    StorageBase,
)

QUEUE = "bench"
HANDLER = "noop"


class InstantStore(StorageBase):
    """Claims from a prepared list; completions counted. Nothing else is supported."""

    def __init__(self, tasks: int) -> None:
        self._left = tasks
        self._next = 0
        self.completed: dict[str, int] = {}
        self.done = asyncio.Event()
        self._total = tasks
        self._epoch = datetime.now(UTC)

    def capabilities(self) -> Capabilities:
        return Capabilities(notify=True, batch_complete=True)

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        await asyncio.sleep(0)
        count = min(limit, self._left)
        self._left -= count
        now = datetime.now(UTC)
        claims = []
        for _ in range(count):
            n = self._next
            self._next += 1
            task = Envelope(
                id=f"t{n:08d}",
                queue=queue,
                handler_ref=HANDLER,
                payload={"i": n, "kind": "bench", "to": f"user-{n}@example.com"},
                status=Status.IN_FLIGHT,
                created_at=self._epoch,
                next_attempt_at=self._epoch,
                lease_expires_at=now + lease,
                claimed_by=worker_id,
                claimed_at=now,
            )
            claims.append(Claimed(task, f"token-{n}"))
        return claims

    async def complete_many(self, completions: Sequence[Completion]) -> list[Any]:
        await asyncio.sleep(0)
        for item in completions:
            if item.attempt.outcome is not Outcome.SUCCEEDED:
                raise RuntimeError(f"{item.task_id}: {item.attempt.outcome}")
            self.completed[item.task_id] = self.completed.get(item.task_id, 0) + 1
        if len(self.completed) >= self._total:
            self.done.set()
        return [None] * len(completions)

    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self.complete_many([Completion(task_id, token, attempt)])

    async def wait_due(self, queue: str, timeout: float) -> bool:
        await asyncio.sleep(min(timeout, 0.01))
        return False

    async def stats(self, queue: str) -> Stats:
        return Stats(
            queue=queue,
            pending=self._left,
            in_flight=0,
            dlq_depth=0,
            succeeded=len(self.completed),
            oldest_pending_age=None,
            as_of=datetime.now(UTC),
        )

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        return datetime.now(UTC) + lease

    async def now(self) -> datetime:
        return datetime.now(UTC)

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        raise NotImplementedError

    async def reschedule(self, *args: Any) -> None:
        raise NotImplementedError

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        raise NotImplementedError(f"{task_id} dead-lettered: {attempt}")

    async def dlq_list(self, *args: Any) -> Any:
        raise NotImplementedError

    async def get(self, task_id: str) -> Envelope:
        raise NotImplementedError

    async def redrive(self, *args: Any) -> int:
        raise NotImplementedError

    async def purge(self, *args: Any) -> int:
        raise NotImplementedError

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        return 0

    async def list_tasks(self, *args: Any) -> Any:
        raise NotImplementedError

    async def cancel(self, *args: Any) -> int:
        raise NotImplementedError

    async def list_queues(self) -> Any:
        raise NotImplementedError

    async def import_tasks(self, *args: Any) -> Any:
        raise NotImplementedError

    async def append_audit(self, *args: Any) -> Any:
        raise NotImplementedError

    async def list_audit(self, *args: Any) -> Any:
        raise NotImplementedError


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def one_run(tasks: int, workers: int, concurrency: int) -> tuple[float, float]:
    """Drain ``tasks`` with ``workers`` Worker objects on one loop; (wall s, CPU s)."""
    app = rdq.App()
    app.queue(QUEUE, concurrency=concurrency)

    @app.handler(HANDLER, queue=QUEUE)
    async def noop(body: dict[str, Any]) -> None:
        return None

    store = InstantStore(tasks)
    await store.connect()
    running = [
        rdq.Worker(app, store, queues=[QUEUE], maintenance=False, lease_thread=False)
        for _ in range(workers)
    ]
    wall, cpu = time.perf_counter(), _cpu()
    runs = [asyncio.create_task(w.run()) for w in running]
    finished = asyncio.create_task(store.done.wait())
    await asyncio.wait([finished, *runs], return_when=asyncio.FIRST_COMPLETED)
    for run in runs:
        if run.done():
            run.result()  # a worker that failed says why
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    for w in running:
        w.stop()
    await asyncio.gather(*runs)
    twice = [t for t, n in store.completed.items() if n != 1]
    if len(store.completed) != tasks or twice:
        raise SystemExit(f"{len(store.completed)} of {tasks} completed; {len(twice)} twice")
    return wall, cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1, help="Worker objects in this process")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    args = parser.parse_args(argv)
    rdq.logging.configure(json=True, level="WARNING")
    runner: Any = asyncio.run
    if args.uvloop:
        import uvloop

        runner = uvloop.run
    walls, cpus = [], []
    for _ in range(args.repeat):
        wall, cpu = runner(one_run(args.tasks, args.workers, args.concurrency))
        walls.append(wall / args.tasks * 1e6)
        cpus.append(cpu / args.tasks * 1e6)
        print(f"{walls[-1]:.1f} µs wall, {cpus[-1]:.1f} µs CPU per task", file=sys.stderr)
    print(
        f"median of {args.repeat}: {statistics.median(walls):.1f} µs wall, "
        f"{statistics.median(cpus):.1f} µs CPU per task "
        f"({args.tasks} tasks, {args.workers} worker(s), concurrency {args.concurrency})"
    )


if __name__ == "__main__":
    main()
