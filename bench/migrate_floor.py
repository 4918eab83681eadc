"""Migration 0014 (the claim floor) on a populated database, timed:
``python -m bench.migrate_floor [--tasks 1000000] [--url POSTGRES_URL]``.

Creates a fresh schema at version 13 (the migrations before the claim floor, as a release of
that version left it) on ``--url`` (else a durable throwaway cluster from the local binaries),
fills it with ``--tasks`` tasks in one queue — 60 % SUCCEEDED, 30 % PENDING and due (their due
times spread over the last day), 5 % DEAD, 5 % IN_FLIGHT (half of them with lapsed leases) —
and runs ``migrate()`` as ``rdq migrate`` does, timing it. Then checks that every row reads back
unchanged (a checksum of every column the upgrade could touch), that the first claim takes the
oldest due tasks, and that a task enqueued due before them after that claim goes next. Prints
the fill and migration times; exits 1 on any difference. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import time
from datetime import timedelta

import asyncpg

from bench._servers import postgres
from rdq.spi import Envelope
from rdq_postgres import PostgresStorage
from rdq_postgres._queries import Queries, migrations

CHECKSUM = """
SELECT count(*) AS n,
       sum(hashtext(id || status || coalesce(token, '') || coalesce(next_attempt_at::text, '')
           || coalesce(lease_expires_at::text, '') || coalesce(payload::text, ''))::bigint) AS h
FROM {s}.task
"""


async def _before_the_floor(conn: asyncpg.Connection, schema: str) -> None:
    await conn.execute(Queries(schema, f"{schema}_due").script("migrate_prepare"))
    for number, name, sql in migrations(schema, f"{schema}_due"):
        if number < 14:
            await conn.execute(sql)
            await conn.execute(
                f'INSERT INTO "{schema}".schema_migrations (version, name) VALUES ($1, $2)',
                number,
                name,
            )


async def run(url: str, tasks: int) -> int:
    schema = f"floor_{secrets.token_hex(4)}"
    s = f'"{schema}"'
    conn = await asyncpg.connect(url)
    try:
        await _before_the_floor(conn, schema)
        began = time.monotonic()
        await conn.execute(
            f"INSERT INTO {s}.task (id, queue, handler_ref, payload, status, next_attempt_at,"
            " completed_at, dead_lettered_at, lease_expires_at, claimed_at, claimed_by, token)"
            " SELECT 't-' || lpad(n::text, 8, '0'), 'q', 'job', json_build_object('n', n),"
            " s.status, CASE s.status WHEN 'PENDING' THEN now() - interval '1 day'"
            "     + (n % 86400) * interval '1 second' END,"
            " CASE s.status WHEN 'SUCCEEDED' THEN now() END,"
            " CASE s.status WHEN 'DEAD' THEN now() END,"
            " CASE s.status WHEN 'IN_FLIGHT' THEN now() + CASE WHEN n % 2 = 0"
            "     THEN interval '1 hour' ELSE interval '-2 days' END END,"
            " CASE s.status WHEN 'IN_FLIGHT' THEN now() END,"
            " CASE s.status WHEN 'IN_FLIGHT' THEN 'w' END,"
            " CASE s.status WHEN 'IN_FLIGHT' THEN 'tok-' || n END"
            " FROM generate_series(1, $1::integer) AS n CROSS JOIN LATERAL (SELECT CASE"
            "     WHEN n % 20 < 12 THEN 'SUCCEEDED' WHEN n % 20 < 18 THEN 'PENDING'"
            "     WHEN n % 20 = 18 THEN 'DEAD' ELSE 'IN_FLIGHT' END AS status) AS s",
            tasks,
        )
        await conn.execute(f"VACUUM ANALYZE {s}.task")
        filled = time.monotonic() - began
        size = await conn.fetchval(f"SELECT pg_size_pretty(pg_total_relation_size('{s}.task'))")
        before = await conn.fetchrow(CHECKSUM.format(s=s))
        print(f"filled {tasks:,} tasks ({size}) in {filled:.1f} s")
        async with PostgresStorage.from_url(f"{url}?schema={schema}") as store:
            began = time.monotonic()
            applied = await store.migrate()
            took = time.monotonic() - began
            print(f"migrate(): {applied} in {took * 1000:.0f} ms")
            after = await conn.fetchrow(CHECKSUM.format(s=s))
            # the tasks due no later than the 100th oldest (a lapsed lease is due at its end)
            oldest = {
                r["id"]
                for r in await conn.fetch(
                    f"SELECT id FROM {s}.task WHERE status IN ('PENDING', 'IN_FLIGHT')"
                    f" AND due_at <= (SELECT due_at FROM {s}.task"
                    "  WHERE status IN ('PENDING', 'IN_FLIGHT') AND due_at <= now()"
                    "  ORDER BY due_at OFFSET 99 LIMIT 1)"
                )
            }
            began = time.monotonic()
            claimed = await store.claim_due("q", 100, timedelta(minutes=5))
            first_claim = time.monotonic() - began
            late = Envelope(
                id="late",
                queue="q",
                handler_ref="job",
                next_attempt_at=await store.now() - timedelta(days=3),
            )
            await store.enqueue(late)
            (next_one,) = await store.claim_due("q", 1, timedelta(minutes=5))
        ok = True
        assert before is not None and after is not None
        if dict(after) != dict(before):
            print(f"rows changed: {dict(before)} -> {dict(after)}")
            ok = False
        if len(claimed) != 100 or not {c.task.id for c in claimed} <= oldest:
            print("the first claim passed over older due tasks")
            ok = False
        print(f"first claim of 100 after the upgrade: {first_claim * 1000:.0f} ms")
        if next_one.task.id != "late":
            print(f"a task enqueued due in the past was passed over: got {next_one.task.id}")
            ok = False
        print("verified: every row unchanged, claims in order" if ok else "FAILED")
        return 0 if ok else 1
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a PostgreSQL URL (default: a durable throwaway cluster)")
    parser.add_argument("--tasks", type=int, default=1_000_000)
    args = parser.parse_args()
    with postgres(args.url) as url:
        sys.exit(asyncio.run(run(url, args.tasks)))


if __name__ == "__main__":
    main()
