"""Would resolving many claims in one statement pay? ``python -m bench.e2e.resolve_experiment``.

Evidence behind the Postgres plugin's ``complete_many`` (BENCHMARKS.md, "Experiments behind the
design"). On a throwaway durable cluster, one process drains ``--tasks`` rdq tasks through the SPI
without the engine, in three ways, and prints tasks/s for each:

* ``per-task``: ``claim_due(limit)`` then one ``complete`` per task, all concurrently on the
  store's pool (what the engine does today);
* ``one-statement``: ``claim_due(limit)`` then every claimed task completed by one statement
  (``sql/complete_many.sql``: an UPDATE over ``unnest``, still fenced on each task's token);
* ``pipelined``: like ``one-statement``, with the next claim sent while the previous batch's
  completion is in flight (two connections busy at once).

Every task is verified SUCCEEDED with exactly one SUCCEEDED attempt afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import msgspec

import rdq
from bench.e2e import cluster
from rdq.spi import Attempt, Claimed, Outcome

QUEUE = "exp"
LEASE = timedelta(seconds=30)
COMPLETE_MANY = (Path(__file__).parent / "sql" / "complete_many.sql").read_text()


def _attempt(claimed: Claimed) -> Attempt:
    now = datetime.now(UTC)
    return Attempt(
        number=claimed.task.attempt_count + 1,
        outcome=Outcome.SUCCEEDED,
        started_at=now,
        finished_at=now,
        worker_id="experiment",
    )


async def _complete_many(pool: asyncpg.Pool, claims: list[Claimed]) -> None:
    attempts = [_attempt(c) for c in claims]
    rows = await pool.fetch(
        COMPLETE_MANY,
        [c.task.id for c in claims],
        [c.token for c in claims],
        [msgspec.json.encode(a).decode() for a in attempts],
        [None] * len(claims),
    )
    stale = [r["id"] for r in rows if not r["done"]]
    if stale:
        raise RuntimeError(f"stale claims: {stale[:3]}")


async def _drain(storage: Any, pool: asyncpg.Pool, mode: str, limit: int, tasks: int) -> float:
    done = 0
    started = time.perf_counter()
    pending: asyncio.Task[None] | None = None
    while done < tasks:
        claims = await storage.claim_due(QUEUE, limit, LEASE)
        if not claims:
            if pending is not None:
                await pending
                pending = None
                continue
            raise RuntimeError(f"nothing to claim after {done} of {tasks}")
        if mode == "per-task":
            await asyncio.gather(
                *(storage.complete(c.task.id, c.token, _attempt(c)) for c in claims)
            )
        elif mode == "one-statement":
            await _complete_many(pool, claims)
        else:
            if pending is not None:
                await pending
            pending = asyncio.create_task(_complete_many(pool, claims))
        done += len(claims)
    if pending is not None:
        await pending
    return tasks / (time.perf_counter() - started)


async def verify_drained(conn: asyncpg.Connection, tasks: int) -> None:
    ok = await conn.fetchval(
        """SELECT count(*) FROM rdq.task WHERE queue = $1 AND status = 'SUCCEEDED'
           AND attempt_count = 1 AND json_array_length(attempts) = 1
           AND attempts -> 0 ->> 'outcome' = 'SUCCEEDED'""",
        QUEUE,
    )
    if ok != tasks:
        raise RuntimeError(f"{ok} of {tasks} tasks completed exactly once")


async def main(args: argparse.Namespace) -> None:
    """Run each mode ``--repeat`` times, interleaved, and print the medians."""
    async with cluster.experiment_store(args.url) as (_server, url, storage):
        client = rdq.Client(storage)
        pool = await asyncpg.create_pool(url, min_size=2, max_size=4)
        conn = await asyncpg.connect(url)
        results: dict[str, list[float]] = {}
        try:
            for _ in range(args.repeat):
                for mode in args.modes:
                    await conn.execute("TRUNCATE rdq.task CASCADE")
                    await client.submit_many(
                        [rdq.Submission("noop", {"i": i}, queue=QUEUE) for i in range(args.tasks)]
                    )
                    rate = await _drain(storage, pool, mode, args.limit, args.tasks)
                    await verify_drained(conn, args.tasks)
                    results.setdefault(mode, []).append(rate)
                    print(f"{mode:14} limit={args.limit}: {rate:8,.0f} tasks/s (verified)")
        finally:
            await conn.close()
            await pool.close()
    for mode, rates in results.items():
        rates.sort()
        print(f"median {mode:14} {rates[len(rates) // 2]:8,.0f} tasks/s  {rates}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.e2e.resolve_experiment")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--limit", type=int, default=10, help="claim_due limit")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--modes",
        type=lambda s: s.split(","),
        default=["per-task", "one-statement", "pipelined"],
    )
    parser.add_argument("--url", default=None)
    asyncio.run(main(parser.parse_args()))
