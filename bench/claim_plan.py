"""The claim's plan on a small table: idle one-row claims through ``claim_due()`` as shipped
(schema 8: no sequential scans, no hash or merge joins) beside a copy without those settings
(schema 7's function), on a durable throwaway cluster (or ``--url``).

    python -m bench.claim_plan                  # 1,000 rounds, 20 ms idle before each claim

Evidence behind migration 0008 (BENCHMARKS.md, "The claim's plan on a small table"). The
function plans its statement once per connection. A worker that connects to a new or
truncated table plans it on a table the planner takes for nearly empty, and keeps that plan
while the table fills with succeeded tasks. Here ``--warm`` tasks are submitted and the table
truncated (as a fresh deployment or a benchmark starts); then two connections, one per
function, are opened and each round submits one task, waits ``--idle`` ms, claims it with a
one-row claim on one connection (the two alternating, their order switched every round) and
completes it. Each claimed task stays in the table as SUCCEEDED, as ``task_ttl`` keeps it, so
the table grows by two rows a round. It prints the median claim of each function per window
of ``--window`` rounds, with the table's size at the window's end; the claim of a plan that
scans the table grows with it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Sequence

import asyncpg

from bench._servers import postgres
from rdq.spi import Envelope
from rdq_postgres import PostgresStorage

SCHEMA = "claim_plan"
QUEUE = "q"
CLAIM = "SELECT id FROM {schema}.{function}($1, 1, 30000000, 'experiment')"
FUNCTIONS = {
    "schema 8 (as shipped)": "claim_due",
    "schema 7 (planner settings reset)": "claim_due_schema7",
}
COMPLETE = f"""
UPDATE {SCHEMA}.task SET status = 'SUCCEEDED', completed_at = now() WHERE id = $1
"""


async def _copy_schema7(admin: asyncpg.Connection) -> None:
    """claim_due() under another name, without the settings migration 0008 gave it."""
    source: str = await admin.fetchval(
        f"SELECT pg_get_functiondef('{SCHEMA}.claim_due(text, bigint, bigint, text)'::regprocedure)"
    )
    copy = FUNCTIONS["schema 7 (planner settings reset)"]
    await admin.execute(source.replace(f"{SCHEMA}.claim_due(", f"{SCHEMA}.{copy}(", 1))
    await admin.execute(f"ALTER FUNCTION {SCHEMA}.{copy}(text, bigint, bigint, text) RESET ALL")


def _p50(values: Sequence[float]) -> float:
    return statistics.median(values)


def _p99(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


async def measure(base: str, rounds: int, idle_ms: float, warm: int, window: int) -> None:
    admin = await asyncpg.connect(base)
    try:
        async with PostgresStorage.from_url(base, schema=SCHEMA) as store:
            await store.migrate()
            await _copy_schema7(admin)
            await store.enqueue_batch(
                [Envelope(id=uuid.uuid4().hex, queue="warm", handler_ref="h") for _ in range(warm)]
            )
            await admin.execute(f"TRUNCATE {SCHEMA}.task")
            conns = {name: await asyncpg.connect(base) for name in FUNCTIONS}
            claims: dict[str, list[float]] = {name: [] for name in FUNCTIONS}
            print(f"{warm:,} tasks submitted and truncated; {rounds:,} rounds, {idle_ms:g} ms idle")
            try:
                for round_ in range(rounds):
                    order = list(FUNCTIONS) if round_ % 2 else list(reversed(FUNCTIONS))
                    for name in order:
                        sql = CLAIM.format(schema=SCHEMA, function=FUNCTIONS[name])
                        task = Envelope(id=uuid.uuid4().hex, queue=QUEUE, handler_ref="h")
                        await store.enqueue(task)
                        await asyncio.sleep(idle_ms / 1000)
                        started = time.perf_counter()
                        rows = await conns[name].fetch(sql, QUEUE)
                        claims[name].append((time.perf_counter() - started) * 1e3)
                        if len(rows) != 1:
                            raise RuntimeError(f"{name} claimed {len(rows)} tasks, not 1")
                        await admin.execute(COMPLETE, rows[0]["id"])
                    if (round_ + 1) % window == 0:
                        size = await admin.fetchval(f"SELECT count(*) FROM {SCHEMA}.task")
                        cells = ", ".join(
                            f"{name} {_p50(v[-window:]):.3f} ms" for name, v in claims.items()
                        )
                        print(f"rounds {round_ + 2 - window}-{round_ + 1} ({size:,} rows): {cells}")
            finally:
                for conn in conns.values():
                    await conn.close()
            done = await admin.fetchval(
                f"SELECT count(*) FROM {SCHEMA}.task WHERE queue = $1 AND status = 'SUCCEEDED'",
                QUEUE,
            )
            if done != 2 * rounds:
                raise RuntimeError(f"{done} of {2 * rounds} tasks claimed and completed")
            print(f"medians of all {rounds:,} rounds:")
            for name, values in claims.items():
                print(f"  {name}: {_p50(values):.3f} ms, p99 {_p99(values):.3f} ms")
            await admin.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    finally:
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing PostgreSQL (default: a throwaway cluster)")
    parser.add_argument("--rounds", type=int, default=1000, help="rounds (two claims each)")
    parser.add_argument("--idle", type=float, default=20, help="ms between a submit and its claim")
    parser.add_argument("--warm", type=int, default=20000, help="tasks submitted, then truncated")
    parser.add_argument("--window", type=int, default=250, help="rounds per printed median")
    args = parser.parse_args()
    with postgres(args.url) as base:
        asyncio.run(measure(base, args.rounds, args.idle, args.warm, args.window))


if __name__ == "__main__":
    main()
