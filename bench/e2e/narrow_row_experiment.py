"""Would a narrow hot row pay? ``python -m bench.e2e.narrow_row_experiment``.

Evidence for BENCHMARKS.md ("Experiments behind the design"). rdq's task row holds the lease
state a claim and a completion change beside the envelope and attempt history they only read
or append to, so each of them writes a new version of the whole row (and its index entries).
This experiment drains the same tasks, on one durable throwaway cluster, through the SPI-level
statements of five layouts, and prints tasks/s and the PostgreSQL server's CPU per task:

* ``wide``: rdq's schema as shipped (``claim_due()`` and ``complete_many.sql``, the store's own
  statements);
* ``narrow``: the task split in two tables (``sql/narrow/schema.sql``): the lease state in a
  narrow row, the envelope in a body row; a completion appends its attempt to the body;
* ``narrow_hot``: the same, the body at fillfactor 50 so that appending can be a HOT update;
* ``attempt_rows``: the body never updated, each attempt record a row of its own;
* ``delete``: a queue that keeps nothing (one narrow row, deleted on completion, no history):
  the ceiling, not a layout rdq could take (it drops the history rdq keeps for ``task_ttl``);
* ``wide_delete``: rdq's schema and claim, each task deleted on completion: the same trade on
  rdq's own row (what the claim's index entries cost, apart from what keeping the task costs).

``--loops`` drain loops each claim ``--limit`` tasks and complete the previous claim's tasks in
one statement, the two sent at once on two connections, as a worker does. Every task is verified
completed once, with one attempt record, afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import msgspec

import rdq
from bench.e2e import cluster
from bench.e2e.resolve_experiment import QUEUE
from bench.e2e.systems import payload
from rdq.spi import Attempt, Outcome
from rdq_postgres._queries import Queries

LAYOUTS = ("wide", "wide_delete", "narrow", "narrow_hot", "attempt_rows", "delete")
LEASE_US = 30_000_000
SQL = Path(__file__).parent / "sql" / "narrow"
WAL_POSITION = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
WIDE_DELETE = (SQL / "complete_wide_delete.sql").read_text()
_encode = msgspec.json.Encoder().encode

Connection = Any  # an asyncpg connection, or a pool's proxy of one
Claim = Callable[[Connection, int], Awaitable[list[asyncpg.Record]]]
Complete = Callable[[Connection, list[asyncpg.Record]], Awaitable[int]]


def _sql(name: str, variant: str = "") -> str:
    return (SQL / name).read_text().replace("{variant}", variant)


def _attempt() -> str:
    now = datetime.now(UTC)
    record = Attempt(
        number=1, outcome=Outcome.SUCCEEDED, started_at=now, finished_at=now, worker_id="exp"
    )
    return _encode(record).decode()


def _statements(layout: str) -> tuple[Claim, Complete]:
    """The claim and the batch completion of ``layout``."""
    if layout in ("wide", "wide_delete"):
        sql = Queries("rdq", "rdq")
        claim_sql, complete_sql = sql.claim, sql.complete_many

        async def claim(conn: Connection, limit: int) -> list[asyncpg.Record]:
            args = {"queue": QUEUE, "limit": limit, "lease_us": LEASE_US, "worker_id": "exp"}
            rows: list[asyncpg.Record] = await conn.fetch(claim_sql.text, *claim_sql.args(args))
            return rows

        async def complete(conn: Connection, rows: list[asyncpg.Record]) -> int:
            args = {
                "ids": [r["id"] for r in rows],
                "tokens": [r["token"] for r in rows],
                "attempts": [_attempt() for _ in rows],
                "error_types": [None] * len(rows),
            }
            done = await conn.fetchval(complete_sql.text, *complete_sql.args(args))
            return len(done or ())

        async def delete(conn: Connection, rows: list[asyncpg.Record]) -> int:
            ids, tokens = [r["id"] for r in rows], [r["token"] for r in rows]
            return int(await conn.fetchval(WIDE_DELETE, ids, tokens))

        if layout == "wide_delete":
            return claim, delete

        return claim, complete

    if layout == "delete":
        claim_text = "SELECT * FROM \"delete\".claim_due($1, $2, 'exp')"
        complete_text = _sql("complete_delete.sql")
    else:
        claim_text = f"SELECT * FROM {layout}.claim_due($1, $2, {LEASE_US}, 'exp')"
        body = "complete_attempt_rows.sql" if layout == "attempt_rows" else "complete_body.sql"
        complete_text = _sql(body, layout)

    async def claim_proto(conn: Connection, limit: int) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = await conn.fetch(claim_text, QUEUE, limit)
        return rows

    async def complete_proto(conn: Connection, rows: list[asyncpg.Record]) -> int:
        ids, tokens = [r["id"] for r in rows], [r["token"] for r in rows]
        if layout == "delete":
            row = await conn.fetchrow(complete_text, ids, tokens)
        else:
            row = await conn.fetchrow(complete_text, ids, tokens, [_attempt() for _ in rows])
        if row["done"] != row["recorded"]:
            raise RuntimeError(f"{row['done']} completed, {row['recorded']} recorded")
        return int(row["done"])

    return claim_proto, complete_proto


async def _drain_loop(pool: asyncpg.Pool, layout: str, limit: int) -> int:
    claim, complete = _statements(layout)
    completed = 0
    previous: list[asyncpg.Record] = []
    async with pool.acquire() as claimer, pool.acquire() as completer:
        while True:
            if previous:
                claims, done = await asyncio.gather(
                    claim(claimer, limit), complete(completer, previous)
                )
                if done != len(previous):
                    raise RuntimeError(f"{done} of {len(previous)} completed")
            else:
                claims = await claim(claimer, limit)
            completed += len(previous)
            if not claims and not previous:
                return completed
            previous = claims


async def _load(conn: asyncpg.Connection, client: rdq.Client, layout: str, tasks: int) -> None:
    """``tasks`` tasks enqueued by rdq's client, then moved into ``layout``'s tables."""
    await conn.execute(
        "TRUNCATE rdq.task, narrow.lease, narrow.body, narrow_hot.lease, narrow_hot.body,"
        ' attempt_rows.lease, attempt_rows.body, attempt_rows.attempt, "delete".job CASCADE'
    )
    for start in range(0, tasks, 1000):
        count = min(1000, tasks - start)
        await client.submit_many(
            [rdq.Submission("noop", payload(i), queue=QUEUE) for i in range(start, start + count)]
        )
    if layout in ("wide", "wide_delete"):
        return
    if layout == "delete":
        await conn.execute(
            'INSERT INTO "delete".job (id, queue, priority, handler_ref, payload, run_at)'
            " SELECT id, queue, priority, handler_ref, payload, next_attempt_at FROM rdq.task"
        )
    else:
        await conn.execute(
            f"INSERT INTO {layout}.lease (id, queue, priority, status, next_attempt_at)"
            " SELECT id, queue, priority, status, next_attempt_at FROM rdq.task ORDER BY id"
        )
        await conn.execute(
            f"INSERT INTO {layout}.body (id, handler_ref, payload, headers, created_at, retry)"
            " SELECT id, handler_ref, payload, headers, created_at, retry FROM rdq.task"
            " ORDER BY id"
        )
    await conn.execute("TRUNCATE rdq.task CASCADE")


async def _verify(conn: asyncpg.Connection, layout: str, tasks: int) -> None:
    """Every task completed once, with one SUCCEEDED attempt record (none left, for delete)."""
    if layout == "wide":
        query = """SELECT count(*) FROM rdq.task WHERE status = 'SUCCEEDED' AND attempt_count = 1
                   AND json_array_length(attempts) = 1
                   AND attempts -> 0 ->> 'outcome' = 'SUCCEEDED'"""
    elif layout in ("delete", "wide_delete"):
        table = "rdq.task" if layout == "wide_delete" else '"delete".job'
        left = await conn.fetchval(f"SELECT count(*) FROM {table}")
        if left:
            raise RuntimeError(f"{left} jobs left")
        return
    elif layout == "attempt_rows":
        records = await conn.fetchval("SELECT count(*) FROM attempt_rows.attempt")
        if records != tasks:
            raise RuntimeError(f"{records} attempt records for {tasks} tasks")
        query = """SELECT count(*) FROM attempt_rows.lease l
                   JOIN attempt_rows.attempt a ON a.task_id = l.id AND a.number = 1
                   WHERE l.status = 'SUCCEEDED' AND l.attempt_count = 1
                   AND a.record ->> 'outcome' = 'SUCCEEDED'"""
    else:
        query = f"""SELECT count(*) FROM {layout}.lease l JOIN {layout}.body b USING (id)
                    WHERE l.status = 'SUCCEEDED' AND l.attempt_count = 1
                    AND json_array_length(b.attempts) = 1
                    AND b.attempts -> 0 ->> 'outcome' = 'SUCCEEDED'"""
    ok = await conn.fetchval(query)
    if ok != tasks:
        raise RuntimeError(f"{ok} of {tasks} tasks completed exactly once")


async def _size(conn: asyncpg.Connection, layout: str) -> int:
    """Bytes of the layout's tables and their indexes."""
    tables = {
        "wide": ["rdq.task"],
        "wide_delete": ["rdq.task"],
        "delete": ['"delete".job'],
        "attempt_rows": ["attempt_rows.lease", "attempt_rows.body", "attempt_rows.attempt"],
    }.get(layout, [f"{layout}.lease", f"{layout}.body"])
    total = 0
    for table in tables:
        total += await conn.fetchval("SELECT pg_total_relation_size($1::regclass)", table)
    return total


async def main(args: argparse.Namespace) -> None:
    """Run each layout ``--repeat`` times, interleaved, and print the medians."""
    async with cluster.experiment_store(args.url) as (server, url, storage):
        client = rdq.Client(storage)
        conn = await asyncpg.connect(url)
        await conn.execute(_sql("schema.sql"))
        for variant in ("narrow", "narrow_hot", "attempt_rows"):
            await conn.execute(_sql("claim.sql", variant))
        await conn.execute(_sql("claim_delete.sql"))
        pool = await asyncpg.create_pool(url, min_size=2 * args.loops, max_size=2 * args.loops)
        results: dict[str, list[tuple[float, float | None, float]]] = {}
        try:
            for _ in range(args.repeat):
                for layout in args.layouts:
                    await _load(conn, client, layout, args.tasks)
                    await cluster.quiesce(server.url, url)
                    wal_before = await conn.fetchval(WAL_POSITION)
                    db_before = server.cpu_seconds()
                    started = time.perf_counter()
                    loops = [_drain_loop(pool, layout, args.limit) for _ in range(args.loops)]
                    done = sum(await asyncio.gather(*loops))
                    elapsed = time.perf_counter() - started
                    db_after = server.cpu_seconds()
                    wal = await conn.fetchval(WAL_POSITION) - wal_before
                    if done != args.tasks:
                        raise RuntimeError(f"{done} of {args.tasks} drained")
                    await _verify(conn, layout, args.tasks)
                    db_us = (
                        None
                        if db_before is None or db_after is None
                        else (db_after - db_before) / args.tasks * 1e6
                    )
                    wal_bytes = float(wal) / args.tasks
                    size = await _size(conn, layout) / args.tasks
                    results.setdefault(layout, []).append((args.tasks / elapsed, db_us, wal_bytes))
                    db = "?" if db_us is None else f"{db_us:.0f}"
                    print(
                        f"{layout:12} loops={args.loops} limit={args.limit}: "
                        f"{args.tasks / elapsed:8,.0f} tasks/s, PostgreSQL {db} µs/task, "
                        f"WAL {wal_bytes:,.0f} B/task, tables {size:,.0f} B/task (verified)",
                        flush=True,
                    )
        finally:
            await pool.close()
            await conn.close()
    wide = statistics.median(r[0] for r in results["wide"]) if "wide" in results else None
    for layout, runs in results.items():
        rate = statistics.median(r[0] for r in runs)
        cpus = [r[1] for r in runs if r[1] is not None]
        cpu = f"{statistics.median(cpus):.0f}" if cpus else "?"
        wal_b = statistics.median(r[2] for r in runs)
        ratio = f", {rate / wide:.2f}× wide" if wide else ""
        print(
            f"median {layout:12} {rate:8,.0f} tasks/s{ratio}, PostgreSQL {cpu} µs/task, "
            f"WAL {wal_b:,.0f} B/task"
        )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e.narrow_row_experiment")
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--limit", type=int, default=10, help="tasks per claim")
    parser.add_argument("--loops", type=int, default=1, help="concurrent drain loops")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--layouts",
        type=lambda text: [name for name in text.split(",") if name],
        default=list(LAYOUTS),
        help=f"comma-separated, of {', '.join(LAYOUTS)}",
    )
    parser.add_argument("--url", default=None)
    return parser


if __name__ == "__main__":
    arguments = _parser().parse_args()
    unknown = set(arguments.layouts) - set(LAYOUTS)
    if unknown:
        raise SystemExit(f"--layouts: unknown {', '.join(sorted(unknown))}")
    asyncio.run(main(arguments))
