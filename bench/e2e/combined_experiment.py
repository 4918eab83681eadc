"""Would completing a batch and claiming the next in one statement pay?
``python -m bench.e2e.combined_experiment``.

Evidence for BENCHMARKS.md ("Experiments behind the design"). On a throwaway durable
cluster, ``--loops`` concurrent drain loops in one process drain ``--tasks`` rdq tasks through
the SPI, without the engine, in two ways, and print tasks/s and CPU per task (this process,
and the PostgreSQL server's processes):

* ``pair``: ``claim_due(limit)`` for the next batch and ``complete_many`` of the previous one,
  sent at once on two connections (what a worker does today);
* ``combined``: one statement (``sql/complete_and_claim.sql``) that records the previous
  batch's completions and claims the next batch.

Every task is verified SUCCEEDED with exactly one SUCCEEDED attempt afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import msgspec

import rdq
from bench.e2e import cluster
from bench.e2e.resolve_experiment import QUEUE, verify_drained
from bench.e2e.systems import payload
from rdq.spi import Attempt, Claimed, Completion, Outcome
from rdq_postgres._codec import envelope_from_row

LEASE = timedelta(seconds=30)
COMBINED = (Path(__file__).parent / "sql" / "complete_and_claim.sql").read_text()
_encode = msgspec.json.Encoder().encode


def _attempt() -> Attempt:
    now = datetime.now(UTC)
    return Attempt(
        number=1, outcome=Outcome.SUCCEEDED, started_at=now, finished_at=now, worker_id="exp"
    )


async def _pair_loop(storage: Any, limit: int) -> int:
    completed = 0
    previous: list[Claimed] = []
    while True:
        if previous:
            items = [Completion(c.task.id, c.token, _attempt()) for c in previous]
            claims, results = await asyncio.gather(
                storage.claim_due(QUEUE, limit, LEASE), storage.complete_many(items)
            )
            if results != [None] * len(items):
                raise RuntimeError(f"not completed: {results}")
        else:
            claims = await storage.claim_due(QUEUE, limit, LEASE)
        completed += len(previous)
        if not claims and not previous:
            return completed
        previous = claims


async def _combined_loop(pool: asyncpg.Pool, limit: int) -> int:
    completed = 0
    previous: list[Claimed] = []
    while True:
        rows = await pool.fetch(
            COMBINED,
            [c.task.id for c in previous],
            [c.token for c in previous],
            [_encode(_attempt()).decode() for _ in previous],
            [None] * len(previous),
            QUEUE,
            limit,
            LEASE,
        )
        claims = []
        for row in rows:
            if row["id"] is None:
                if len(row["done"] or ()) != len(previous):
                    raise RuntimeError(f"{len(row['done'] or ())} of {len(previous)} completed")
            else:
                claims.append(Claimed(envelope_from_row(row), row["token"]))
        completed += len(previous)
        if not claims and not previous:
            return completed
        previous = claims


async def main(args: argparse.Namespace) -> None:
    """Run each mode ``--repeat`` times, interleaved, and print the medians."""
    async with cluster.experiment_store(args.url) as (server, url, storage):
        client = rdq.Client(storage)
        pool = await asyncpg.create_pool(url, min_size=args.loops, max_size=args.loops)
        conn = await asyncpg.connect(url)
        results: dict[str, list[tuple[float, float, float | None]]] = {}
        try:
            for _ in range(args.repeat):
                for mode in ("pair", "combined"):
                    await conn.execute("TRUNCATE rdq.task CASCADE")
                    for start in range(0, args.tasks, 1000):
                        count = min(1000, args.tasks - start)
                        await client.submit_many(
                            [
                                rdq.Submission("noop", payload(i), queue=QUEUE)
                                for i in range(start, start + count)
                            ]
                        )
                    await cluster.quiesce(server.url, url)
                    db_before, cpu_before = server.cpu_seconds(), time.process_time()
                    started = time.perf_counter()
                    if mode == "pair":
                        loops = [_pair_loop(storage, args.limit) for _ in range(args.loops)]
                    else:
                        loops = [_combined_loop(pool, args.limit) for _ in range(args.loops)]
                    done = sum(await asyncio.gather(*loops))
                    elapsed = time.perf_counter() - started
                    client_us = (time.process_time() - cpu_before) / args.tasks * 1e6
                    db_after = server.cpu_seconds()
                    db_us = (
                        None
                        if db_before is None or db_after is None
                        else (db_after - db_before) / args.tasks * 1e6
                    )
                    if done != args.tasks:
                        raise RuntimeError(f"{done} of {args.tasks} drained")
                    await verify_drained(conn, args.tasks)
                    results.setdefault(mode, []).append((args.tasks / elapsed, client_us, db_us))
                    db = "?" if db_us is None else f"{db_us:.0f}"
                    print(
                        f"{mode:9} loops={args.loops}: {args.tasks / elapsed:8,.0f} tasks/s, "
                        f"client CPU {client_us:.0f} µs/task, PostgreSQL {db} µs/task (verified)"
                    )
        finally:
            await conn.close()
            await pool.close()
    for mode, runs in results.items():
        rate = statistics.median(r[0] for r in runs)
        client_cpu = statistics.median(r[1] for r in runs)
        print(f"median {mode:9} {rate:8,.0f} tasks/s, client CPU {client_cpu:.0f} µs/task")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.e2e.combined_experiment")
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--limit", type=int, default=10, help="tasks per claim")
    parser.add_argument("--loops", type=int, default=1, help="concurrent drain loops")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--url", default=None)
    asyncio.run(main(parser.parse_args()))
