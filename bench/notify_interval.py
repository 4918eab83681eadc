"""The PostgreSQL store's NOTIFY interval: submit → handler start under a steady stream, and
the enqueue rate (1 and 4 producers), for each interval given, alternating, on a durable
throwaway cluster (or ``--url``).

    python -m bench.notify_interval                      # 0.02 and 0.005 s, 3 rounds
    python -m bench.notify_interval --intervals 0.02,0.005,0 --rate 200 --rounds 3

One worker (``rdq.Worker``, notify on, concurrency 10) runs a no-op handler; a producer submits
``--rate`` tasks per second for ``--seconds``; the latency of each task is from just before its
``submit`` to its handler's start (the first 10 % left out as warm-up). Every task must run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
import uuid

import rdq
from bench._servers import postgres


def _url(base: str, interval: float) -> str:
    return f"{base}?schema=notify_bench&notify_interval={interval}"


async def stream(base: str, interval: float, rate: float, seconds: float) -> tuple[float, float]:
    """(p50, p99) in ms of submit → start for a steady stream of ``rate`` submits a second."""
    async with rdq.open_storage(_url(base, interval)) as storage:
        await storage.migrate()
        queue = "s" + uuid.uuid4().hex[:8]
        app = rdq.App()
        app.queue(queue, concurrency=10)
        sent: dict[int, float] = {}
        waits: list[float] = []
        expected: list[int] = []  # the number of tasks, once every one is submitted
        all_ran = asyncio.Event()

        @app.handler("noop", queue=queue)
        async def noop(n: int) -> None:
            waits.append(time.perf_counter() - sent[n])
            if expected and len(waits) >= expected[0]:
                all_ran.set()

        worker = rdq.Worker(app, storage, queues=[queue])
        running = asyncio.create_task(worker.run())
        client = rdq.Client(storage, app)
        await asyncio.sleep(1.0)  # the worker is up and waiting
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent[n] = time.perf_counter()
            await client.submit("noop", n, queue=queue)
            n += 1
        expected.append(n)
        if len(waits) >= n:
            all_ran.set()
        with contextlib.suppress(TimeoutError):  # reported below
            await asyncio.wait_for(all_ran.wait(), 30)
        worker.stop()
        await running
        if len(waits) != n:
            raise SystemExit(f"{n - len(waits)} of {n} tasks did not run")
        ms = sorted(w * 1e3 for w in waits[n // 10 :])
        return statistics.median(ms), ms[max(0, int(len(ms) * 0.99) - 1)]


async def enqueue_rate(base: str, interval: float, producers: int, seconds: float) -> float:
    """Tasks a second submitted one at a time by ``producers`` concurrent loops."""
    async with rdq.open_storage(_url(base, interval)) as storage:
        await storage.migrate()
        client = rdq.Client(storage)
        queue = "e" + uuid.uuid4().hex[:8]
        counts = [0] * producers

        async def produce(k: int) -> None:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                await client.submit("noop", None, queue=queue)
                counts[k] += 1

        await asyncio.gather(*(produce(k) for k in range(producers)))
        return sum(counts) / seconds


async def measure(base: str, args: argparse.Namespace) -> None:
    results: dict[tuple[str, float], list[float]] = {}
    for round_ in range(args.rounds):
        for interval in args.intervals:
            p50, p99 = await stream(base, interval, args.rate, args.seconds)
            one = await enqueue_rate(base, interval, 1, 3.0)
            four = await enqueue_rate(base, interval, 4, 3.0)
            print(
                f"round {round_ + 1} notify_interval={interval:g}: stream {args.rate:g}/s "
                f"p50 {p50:.2f} ms p99 {p99:.2f} ms; enqueue {one:,.0f}/s (1), {four:,.0f}/s (4)",
                flush=True,
            )
            for key, value in (("p50", p50), ("p99", p99), ("enq1", one), ("enq4", four)):
                results.setdefault((key, interval), []).append(value)
    print("medians:")
    for interval in args.intervals:
        row = {
            key: statistics.median(results[(key, interval)])
            for key in ("p50", "p99", "enq1", "enq4")
        }
        print(
            f"  notify_interval={interval:g}: p50 {row['p50']:.2f} ms, p99 {row['p99']:.2f} ms, "
            f"enqueue {row['enq1']:,.0f}/s (1 producer), {row['enq4']:,.0f}/s (4)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing PostgreSQL (default: a throwaway cluster)")
    parser.add_argument(
        "--intervals", default="0.02,0.005", type=lambda t: [float(x) for x in t.split(",")]
    )
    parser.add_argument("--rate", type=float, default=200.0, help="submits a second")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each stream")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with postgres(args.url) as base:
        asyncio.run(measure(base, args))


if __name__ == "__main__":
    main()
