"""How long the operator overview takes on a big PostgreSQL task table.

``python -m bench.pg_overview [--url URL] [--rows N] [--queues Q] [--repeat R]`` loads (once
per schema) a table of ``N`` tasks (default 10,000,000) spread over ``Q`` queues (default 20):
queue ``q00`` holds 1,000,000 SUCCEEDED and 100,000 DEAD tasks (plus a few live ones); the
others share the rest, about 90 % SUCCEEDED, 5 % DEAD, 3 % PENDING (half delayed), 1 %
CANCELLED and 1 % IN_FLIGHT. It then times, through ``PostgresStorage``, ``stats("q00")`` and
``list_queues()`` (every queue), ``R`` times each, and prints the median and the worst, plus
how far each estimated count is from the exact one.

Without ``--url`` it runs on a throwaway cluster (``initdb``/``pg_ctl``), loaded with
``fsync=off`` (only reads are timed). Figures: BENCHMARKS.md, "PostgreSQL: the overview on a
big table".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Iterator

import asyncpg

from rdq.spi import Stats
from rdq_compliance.servers.postgres import LocalCluster, find_bindir
from rdq_postgres import PostgresStorage

SCHEMA = "overview"
_STATUSES = ("pending", "in_flight", "dlq_depth", "succeeded", "cancelled")
_COLUMN = {
    "pending": "PENDING",
    "in_flight": "IN_FLIGHT",
    "dlq_depth": "DEAD",
    "succeeded": "SUCCEEDED",
    "cancelled": "CANCELLED",
}

# (status, share of a small queue's rows)
_MIX = [
    ("SUCCEEDED", 0.90),
    ("DEAD", 0.05),
    ("PENDING", 0.03),
    ("CANCELLED", 0.01),
    ("IN_FLIGHT", 0.01),
]


async def _load(url: str, rows: int, queues: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        loaded = await conn.fetchval(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'task'", SCHEMA
        )
        if loaded and await conn.fetchval(f"SELECT EXISTS (SELECT FROM {SCHEMA}.task)"):
            print(f"schema {SCHEMA} already loaded; reusing it", flush=True)
            return
        async with PostgresStorage.from_url(url, schema=SCHEMA) as store:
            await store.migrate()
        started = time.perf_counter()
        insert = f"""
            INSERT INTO {SCHEMA}.task (id, queue, handler_ref, payload, status, created_at,
                                        next_attempt_at, completed_at, dead_lettered_at,
                                        cancelled_at, lease_expires_at, error_type, attempts,
                                        priority)
            SELECT $1 || g, $2, 'app.tasks:send', '{{"to": "someone@example.com", "n": 1}}',
                   $3, now() - interval '1 day',
                   CASE WHEN g % 2 = 0 THEN now() + interval '30 days' ELSE now() - interval '1 day'
                   END,
                   CASE WHEN $3 = 'SUCCEEDED' THEN now() - interval '1 hour' END,
                   CASE WHEN $3 = 'DEAD' THEN now() - interval '2 hours' + g * interval '1 ms'
                   END,
                   CASE WHEN $3 = 'CANCELLED' THEN now() - interval '3 hours' END,
                   CASE WHEN $3 = 'IN_FLIGHT' THEN now() + interval '5 minutes' END,
                   CASE WHEN $3 = 'DEAD' THEN 'Boom' || (g % 3) END,
                   CASE WHEN $3 = 'DEAD'
                        THEN '[{{"number":1,"outcome":"FAILED","error_type":"Boom"}}]'
                        ELSE '[]' END::json,
                   (g % 3) - 1
            FROM generate_series(1, $4::bigint) AS g
        """
        big = [("SUCCEEDED", 1_000_000), ("DEAD", 100_000), ("PENDING", 1_000)]
        plan: list[tuple[str, str, int]] = [("q00", status, n) for status, n in big]
        rest = rows - sum(n for _, n in big)
        per_queue = rest // (queues - 1)
        for q in range(1, queues):
            for status, share in _MIX:
                plan.append((f"q{q:02d}", status, int(per_queue * share)))
        for queue, status, n in plan:
            await conn.execute(insert, f"{queue}-{status.lower()}-", queue, status, n)
            print(f"  {queue} {status:<9} {n:>9,}", flush=True)
        print(f"loaded in {time.perf_counter() - started:.0f} s; vacuum analyze…", flush=True)
        await conn.execute(f"VACUUM ANALYZE {SCHEMA}.task")
        print(f"ready after {time.perf_counter() - started:.0f} s", flush=True)
    finally:
        await conn.close()


async def _exact(url: str) -> dict[tuple[str, str], int]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            f"SELECT queue, status, count(*) AS n FROM {SCHEMA}.task GROUP BY 1, 2"
        )
    finally:
        await conn.close()
    return {(r["queue"], r["status"]): r["n"] for r in rows}


def _timings(samples: list[float]) -> str:
    return f"median {statistics.median(samples):7.1f} ms, worst {max(samples):7.1f} ms"


async def _measure(url: str, repeat: int) -> None:
    exact = await _exact(url)
    async with PostgresStorage.from_url(url, schema=SCHEMA) as store:
        await store.stats("q00")  # prepare the statements
        await store.list_queues()
        one: list[float] = []
        every: list[float] = []
        overview: list[Stats] = []
        for _ in range(repeat):
            started = time.perf_counter()
            await store.stats("q00")
            one.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            overview = await store.list_queues()
            every.append((time.perf_counter() - started) * 1000)
    total = sum(exact.values())
    print(f"\n{total:,} tasks in {len(overview)} queues; {repeat} repetitions each")
    print(f"stats('q00')   {_timings(one)}")
    print(f"list_queues()  {_timings(every)}")
    errors: dict[str, list[tuple[float, int]]] = {}
    for stats in overview:
        for field in stats.estimated:
            true = exact.get((stats.queue, _COLUMN[field]), 0)
            error = abs(getattr(stats, field) - true) / true
            errors.setdefault(field, []).append((error, true))
    estimated = sum(len(s.estimated) for s in overview)
    print(f"{estimated} estimated counts (every other count exact); error by status:")
    for field, found in sorted(errors.items()):
        sizes = sorted(true for _, true in found)
        worst = max(error for error, _ in found)
        median = statistics.median(error for error, _ in found)
        print(
            f"  {field:<10} {len(found):>3} counts of {sizes[0]:,}-{sizes[-1]:,}: "
            f"median error {median:.1%}, largest {worst:.1%}"
        )
    for stats in overview[:3]:
        shown = {f: getattr(stats, f) for f in _STATUSES}
        print(f"  {stats.queue}: {shown} estimated={list(stats.estimated)}")


@contextlib.contextmanager
def _server(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no --url and no local initdb/pg_ctl")
    settings = {"fsync": "off", "synchronous_commit": "off", "shared_buffers": "512MB"}
    with LocalCluster(bindir, settings=settings) as cluster:
        yield cluster.url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a server to use (default: a throwaway cluster)")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--queues", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with _server(args.url) as url:
        asyncio.run(_load(url, args.rows, args.queues))
        asyncio.run(_measure(url, args.repeat))


if __name__ == "__main__":
    main()
