"""A burst of tasks into a table analyzed while empty: ``python -m bench.claim_burst``.

Evidence behind migration 0009 (BENCHMARKS.md, "The claim's plan on a small table").
``claim_due()`` plans its statement once per connection. A table that was analyzed while it
was empty (autovacuum, a VACUUM after a purge, a new deployment) and then takes a burst of
tasks has no statistics for them until autovacuum analyzes it again. Here the task table is
analyzed empty, autovacuum is turned off for it (the minute or so before autovacuum would
come), and ``--tasks`` due tasks are submitted; then claims of ``--limit`` through
``claim_due()`` as shipped beside a copy with schema 8's body and settings, on three kinds of
connection each:

* ``planned empty``: connected, and the claim planned, before the burst;
* ``new, stale statistics``: connected after the burst, before any ANALYZE;
* ``after ANALYZE``: the same connections once the table is analyzed (an ANALYZE makes every
  session plan the claim again), and two new ones.

Claims alternate between the (function, connection) pairs, ``--claims`` each, the first two
kinds before the ANALYZE and the third after it; it prints the median claim of each. Claimed
tasks keep a 10-minute lease, so every claim takes fresh ones. On a durable throwaway cluster,
or ``--url``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import asyncpg

from bench._claim import MIGRATIONS
from bench._servers import postgres
from rdq.spi import Envelope
from rdq_postgres import PostgresStorage

SCHEMA = "claim_burst"
QUEUE = "q"
SCHEMA8_SETTINGS = "SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off"
FUNCTIONS = {"schema 9 (as shipped)": "claim_due", "schema 8": "claim_due_schema8"}
CONNECTIONS = ("planned empty", "new, stale statistics", "after ANALYZE")


async def _copy_schema8(admin: asyncpg.Connection) -> None:
    """claim_due() of migrations 0007 and 0008 under another name."""
    text = (MIGRATIONS / "0007_claim_function.sql").read_text().replace("{schema}", SCHEMA)
    body = text[text.index("CREATE FUNCTION") :]
    copy = FUNCTIONS["schema 8"]
    await admin.execute(body.replace(f"{SCHEMA}.claim_due(", f"{SCHEMA}.{copy}(", 1))
    await admin.execute(
        f"ALTER FUNCTION {SCHEMA}.{copy}(text, bigint, bigint, text) {SCHEMA8_SETTINGS}"
    )


def _claim(function: str, limit: int) -> str:
    return f"SELECT id FROM {SCHEMA}.{function}($1, {limit}, 600000000, 'experiment')"


async def _connections(base: str, limit: int) -> dict[str, asyncpg.Connection]:
    """A connection per function, each with the claim planned on it (a first claim)."""
    conns = {}
    for name, function in FUNCTIONS.items():
        conns[name] = conn = await asyncpg.connect(base)
        await conn.fetch(_claim(function, limit), QUEUE)
    return conns


async def _claims(
    opened: dict[str, dict[str, asyncpg.Connection]],
    wall: dict[tuple[str, str], list[float]],
    kinds: tuple[str, ...],
    limit: int,
    claims: int,
) -> None:
    """``claims`` claims on each (function, connection kind) pair, alternating."""
    pairs = [(function, kind) for function in FUNCTIONS for kind in kinds]
    for pair in pairs:
        wall[pair] = []
    for round_ in range(claims):
        for function, kind in pairs[round_ % len(pairs) :] + pairs[: round_ % len(pairs)]:
            started = time.perf_counter()
            rows = await opened[kind][function].fetch(_claim(FUNCTIONS[function], limit), QUEUE)
            wall[function, kind].append((time.perf_counter() - started) * 1e3)
            if len(rows) != limit:
                raise RuntimeError(f"{function}, {kind}: claimed {len(rows)}, not {limit}")


async def measure(base: str, tasks: int, limit: int, claims: int) -> None:
    admin = await asyncpg.connect(base)
    opened: dict[str, dict[str, asyncpg.Connection]] = {}
    try:
        async with PostgresStorage.from_url(base, schema=SCHEMA) as store:
            await store.migrate()
            await _copy_schema8(admin)
            await admin.execute(f"ALTER TABLE {SCHEMA}.task SET (autovacuum_enabled = false)")
            await admin.execute(f"VACUUM ANALYZE {SCHEMA}.task")
            opened["planned empty"] = await _connections(base, limit)
            await store.enqueue_batch(
                [Envelope(id=uuid.uuid4().hex, queue=QUEUE, handler_ref="h") for _ in range(tasks)]
            )
            stats = await admin.fetchrow(
                f"SELECT reltuples, relpages FROM pg_class WHERE oid = '{SCHEMA}.task'::regclass"
            )
            print(
                f"{tasks:,} tasks submitted into a table analyzed empty "
                f"(pg_class: reltuples {stats['reltuples']:g}, relpages {stats['relpages']})"
            )
            opened["new, stale statistics"] = await _connections(base, limit)
            wall: dict[tuple[str, str], list[float]] = {}
            await _claims(opened, wall, CONNECTIONS[:2], limit, claims)
            # an ANALYZE invalidates every session's plans of the table: from here on every
            # connection claims with the plan of the new statistics
            await admin.execute(f"ANALYZE {SCHEMA}.task")
            opened["after ANALYZE"] = await _connections(base, limit)
            await _claims(opened, wall, CONNECTIONS[2:], limit, claims)
            print(f"median claim of {limit} ({claims} claims each):")
            print(f"  {'':<24}" + "".join(f"{kind:>24}" for kind in CONNECTIONS))
            for function in FUNCTIONS:
                cells = "".join(
                    f"{statistics.median(wall[function, kind]):>21.2f} ms" for kind in CONNECTIONS
                )
                print(f"  {function:<24}{cells}")
            claimed = await admin.fetchval(
                f"SELECT count(*) FROM {SCHEMA}.task WHERE status = 'IN_FLIGHT'"
            )
            # the claims that planned the function on the connections opened after the burst
            # took tasks too
            expected = limit * (claims * len(wall) + len(FUNCTIONS) * (len(CONNECTIONS) - 1))
            if claimed != expected:
                raise RuntimeError(f"{claimed} tasks claimed, not {expected}")
    finally:
        for conns in opened.values():
            for conn in conns.values():
                await conn.close()
        await admin.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing PostgreSQL (default: a throwaway cluster)")
    parser.add_argument("--tasks", type=int, default=60_000, help="due tasks in the burst")
    parser.add_argument("--limit", type=int, default=10, help="tasks per claim")
    parser.add_argument("--claims", type=int, default=20, help="claims per function and connection")
    args = parser.parse_args()
    with postgres(args.url) as base:
        asyncio.run(measure(base, args.tasks, args.limit, args.claims))


if __name__ == "__main__":
    main()
