"""Claims of 1, 10, 100 and 200 tasks from a deep queue on PostgreSQL: rdq's claim as shipped
(``claim_due()``, its statement planned once per connection) beside the claim statement of
schema version 6 (planned at every call), alternating, on a durable throwaway cluster (or
``--url``).

    python -m bench.claim_sizes                  # 20,000 due tasks, 25 claims a size, 3 rounds
    python -m bench.claim_sizes --history 1000000  # beside a million succeeded tasks

Each round refills one queue with ``--depth`` due tasks, beside ``--history`` succeeded ones
(the attempt history ``task_ttl`` keeps; ``ANALYZE``d, as autovacuum would) for each
statement in turn, then times ``--claims`` claims of each size through one asyncpg
connection: the statement's round trip, plan, run and commit, nothing of rdq's client. Both
statements claim the same tasks; the figures are medians per claim over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import asyncpg

from bench._servers import postgres
from rdq.spi import Envelope
from rdq_postgres import PostgresStorage

SCHEMA = "claim_sizes"
SIZES = (1, 10, 100, 200)
LEASE_US = 30_000_000

SCHEMA_6_CLAIM = """
WITH due AS (
    SELECT id, due_at
    FROM claim_sizes.task
    WHERE priority = ANY ('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[])
      AND queue = $1
      AND status IN ('PENDING', 'IN_FLIGHT')
      AND due_at <= now()
      AND claim_sizes.unrestricted($1)
    ORDER BY priority DESC, due_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE claim_sizes.task AS t
SET status = 'IN_FLIGHT',
    token = gen_random_uuid()::text,
    claimed_at = now(),
    claimed_by = $4,
    lease_expires_at = now() + $3::bigint * interval '1 microsecond',
    attempt_count = t.attempt_count + CASE WHEN t.status = 'IN_FLIGHT' THEN 1 ELSE 0 END,
    error_type = CASE WHEN t.status = 'IN_FLIGHT' THEN 'LeaseExpired' ELSE t.error_type END,
    attempts = CASE
        WHEN t.status = 'IN_FLIGHT' THEN claim_sizes.append_attempt(CASE
            WHEN json_typeof(t.attempts) = 'array' THEN t.attempts ELSE '[]' END,
            json_build_object(
                'number', t.attempt_count + 1,
                'outcome', 'LEASE_EXPIRED',
                'error_type', 'LeaseExpired',
                'error_message', 'lease expired at ' || claim_sizes.rfc3339(t.lease_expires_at)
                    || ' before the attempt was resolved',
                'started_at', claim_sizes.rfc3339(t.claimed_at),
                'finished_at', claim_sizes.rfc3339(now()),
                'worker_id', t.claimed_by))
        ELSE t.attempts
    END,
    quarantine = CASE WHEN t.status = 'IN_FLIGHT' AND json_typeof(t.attempts) <> 'array'
        THEN claim_sizes.quarantine_add(t.quarantine, 'attempts', t.attempts)
        ELSE t.quarantine END
FROM due
WHERE t.id = due.id
RETURNING t.id, t.queue, t.handler_ref, t.payload, t.headers, t.status, t.attempt_count,
          t.redrive_count, t.attempts, t.created_at, t.next_attempt_at, t.lease_expires_at,
          t.completed_at, t.dead_lettered_at, t.retry, t.priority, t.keys, t.claimed_by,
          t.claimed_at, t.cancelled_at, t.format_version, t.extra, t.quarantine, t.token,
          due.due_at AS claimed_due_at
"""
"""The claim of schema version 6 (docs/postgres-schema.md), which its bindings still run."""


async def _fill(store: PostgresStorage, conn: asyncpg.Connection, depth: int, history: int) -> None:
    await conn.execute(f"TRUNCATE {SCHEMA}.task")
    await conn.execute(
        f"INSERT INTO {SCHEMA}.task (id, queue, handler_ref, status, next_attempt_at,"
        " completed_at) SELECT 'done-' || g, 'deep', 'h', 'SUCCEEDED', now(), now()"
        " FROM generate_series(1, $1) AS g",
        history,
    )
    for start in range(0, depth, 5000):
        await store.enqueue_batch(
            [
                Envelope(id=f"t{i}", queue="deep", handler_ref="h")
                for i in range(start, min(depth, start + 5000))
            ]
        )
    await conn.execute(f"ANALYZE {SCHEMA}.task")


async def _time(conn: asyncpg.Connection, sql: str, size: int) -> float:
    started = time.perf_counter()
    rows = await conn.fetch(sql, "deep", size, LEASE_US, "bench")
    elapsed = time.perf_counter() - started
    if len(rows) != size:
        raise RuntimeError(f"a claim of {size} returned {len(rows)} tasks")
    return elapsed * 1e3


async def measure(base: str, depth: int, history: int, claims: int, rounds: int) -> None:
    if depth < claims * sum(SIZES):
        raise SystemExit(f"--depth must be at least {claims * sum(SIZES)} for --claims {claims}")
    statements: dict[str, str] = {}
    results: dict[str, dict[int, list[float]]] = {}
    async with PostgresStorage.from_url(base, schema=SCHEMA) as store:
        await store.migrate()
        statements["as shipped"] = store._sql.claim.text
        statements["schema 6's statement"] = SCHEMA_6_CLAIM
        conn = await asyncpg.connect(base)
        try:
            for round_ in range(rounds):
                for name, sql in statements.items():
                    await _fill(store, conn, depth, history)
                    for size in SIZES:
                        times = [await _time(conn, sql, size) for _ in range(claims)]
                        results.setdefault(name, {}).setdefault(size, []).extend(times)
                    print(f"round {round_ + 1} {name}: done", flush=True)
        finally:
            await conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
            await conn.close()
    print(
        f"medians per claim ({depth:,} due tasks beside {history:,} succeeded ones,"
        f" {claims} claims a size, {rounds} rounds):"
    )
    for name, by_size in results.items():
        figures = "  ".join(
            f"{size}: {statistics.median(values):.3f} ms" for size, values in by_size.items()
        )
        print(f"  {name:22s} {figures}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing PostgreSQL (default: a throwaway cluster)")
    parser.add_argument("--depth", type=int, default=20_000, help="due tasks in the queue")
    parser.add_argument("--history", type=int, default=0, help="succeeded tasks beside them")
    parser.add_argument("--claims", type=int, default=25, help="claims of each size a round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with postgres(args.url) as base:
        asyncio.run(measure(base, args.depth, args.history, args.claims, args.rounds))


if __name__ == "__main__":
    main()
