"""Priority aging on PostgreSQL: how long 20 priority −10 tasks wait behind a steady stream of
priority 10 tasks that keeps the claimant busy, strict and with ``aging``.

    python -m bench.aging --aging 0.25 1     # 84 tasks/s for 15 s, claims of 10 at 80/s

Each mode makes a fresh queue holding ``--backlog`` priority 10 tasks and then 20 of
priority −10, all due at once; then a producer submits priority 10 tasks at ``--rate`` per
second for ``--seconds`` while one claimant takes ``claim_due(queue, 10, lease)`` at most
``--capacity`` tasks per second (a worker that cannot keep up: priority 10 tasks are always
due). It prints when the claimant took the first and the last low-priority task, counted
from the start of the stream, and how many priority 10 tasks it took before the last one.
Nothing is completed (claims only).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from datetime import timedelta

from bench._servers import postgres
from rdq.spi import QUEUE_KEY, Control, Envelope
from rdq_postgres import PostgresStorage

LEASE = timedelta(minutes=30)
LOW = 20


async def run(store: PostgresStorage, aging: float | None, args: argparse.Namespace) -> str:
    queue = f"aging-{uuid.uuid4().hex[:8]}"
    if aging is not None:
        await store.put_control(
            Control(queue=queue, key=QUEUE_KEY, aging=aging), expected_version=0
        )
    await store.enqueue_batch(
        [
            Envelope(id=f"{queue}-backlog-{n}", queue=queue, handler_ref="h", priority=10)
            for n in range(args.backlog)
        ]
    )
    await store.enqueue_batch(
        [
            Envelope(id=f"{queue}-low-{n}", queue=queue, handler_ref="h", priority=-10)
            for n in range(LOW)
        ]
    )
    started = time.perf_counter()
    stream_ends = started + args.seconds

    async def produce() -> int:
        sent = 0
        while time.perf_counter() < stream_ends:
            due = started + sent / args.rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            await store.enqueue(
                Envelope(id=f"{queue}-high-{sent}", queue=queue, handler_ref="h", priority=10)
            )
            sent += 1
        return sent

    producer = asyncio.create_task(produce())
    low_at: list[float] = []
    high_before = 0
    taken = 0
    while len(low_at) < LOW:
        due = started + taken / args.capacity
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        for claimed in await store.claim_due(queue, args.batch, LEASE):
            taken += 1
            if claimed.task.priority < 0:
                low_at.append(time.perf_counter() - started)
            elif len(low_at) < LOW:
                high_before += 1
    sent = await producer
    return (
        f"first low task at {low_at[0]:.2f} s, last at {low_at[-1]:.2f} s "
        f"(stream: {sent} tasks in {args.seconds:g} s), {high_before} priority 10 tasks before it"
    )


async def measure(url: str, args: argparse.Namespace) -> None:
    async with PostgresStorage.from_url(url, schema="aging_bench") as store:
        await store.migrate()
        for aging in (None, *args.aging):
            name = "strict" if aging is None else f"aging = {aging:g} s"
            print(f"{name}: {await run(store, aging, args)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing PostgreSQL (default: a throwaway cluster)")
    parser.add_argument("--rate", type=float, default=84.0, help="priority 10 tasks per second")
    parser.add_argument("--seconds", type=float, default=15.0, help="how long the stream runs")
    parser.add_argument("--capacity", type=float, default=80.0, help="tasks claimed per second")
    parser.add_argument("--batch", type=int, default=10, help="tasks per claim")
    parser.add_argument("--backlog", type=int, default=100, help="priority 10 tasks at the start")
    parser.add_argument("--aging", type=float, nargs="*", default=[0.25], help="aging values")
    args = parser.parse_args()
    with postgres(args.url) as base:
        asyncio.run(measure(base, args))


if __name__ == "__main__":
    main()
