"""What an idle one-row claim is made of: ``python -m bench.idle_claim``.

A worker woken by a NOTIFY on an idle queue sends one claim; its round trip is most of rdq's
submit → start latency on PostgreSQL. This benchmark takes that claim apart on a durable
throwaway cluster (or ``--url``): each round runs the steps below one after the other, each
after ``--idle`` ms of quiet (as the worker's claim meets the server after the submit), in an
order rotated every round, and times each from the client:

* ``round trip``: ``SELECT 1``, the network and both processes waking up;
* ``durable commit``: a one-row ``UPDATE`` of a one-row table in autocommit, the round trip
  plus the commit's WAL flush;
* ``minimal claim``: the contention benchmark's pgbench ceiling (a five-column row, one
  partial index, ``FOR UPDATE SKIP LOCKED LIMIT 1``, ``RETURNING id``);
* ``the statement alone``: claim_due()'s statement (its newest migration) prepared on a bare
  asyncpg connection whose session has the function's settings (a generic plan, no
  sequential scans, no hash or merge joins), one task due;
* ``claim_due(), no SET``: a copy of the function without its SET clauses, called on that
  session: the same plan, without the settings saved and restored at every call;
* ``claim_due()``: rdq's claim function as shipped on a bare asyncpg connection;
* ``the store's claim_due``: the same through ``PostgresStorage.claim_due``, as the worker
  calls it (the arguments checked, the row decoded into an envelope).

Each of rdq's claims takes a task submitted before the idle wait, which is then completed
off the clock and kept, as ``task_ttl`` keeps it; the minimal claim's pool of 256 rows stays
due, as in the ceiling. It prints p50 and p99 per step and the client process's CPU per call
(p50), then the differences of the p50s that say where the time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

import asyncpg

from bench._claim import claim_due_source
from bench._servers import postgres
from rdq.spi import Attempt, Envelope, Outcome
from rdq_compliance.bench_pgbench import CLAIM as MINIMAL_CLAIM
from rdq_compliance.bench_pgbench import REFILL, SETUP
from rdq_compliance.bench_pgbench import SCHEMA as CEILING_SCHEMA
from rdq_postgres import PostgresStorage

SCHEMA = "idle_claim"
QUEUE = "q"
LEASE = timedelta(seconds=30)
CLAIM_DUE = f"SELECT * FROM {SCHEMA}.claim_due($1, 1, 30000000, 'experiment')"
STEPS = (
    "round trip",
    "durable commit",
    "minimal claim",
    "the statement alone",
    "claim_due(), no SET",
    "claim_due()",
    "the store's claim_due",
)


def _statement() -> str:
    """claim_due()'s statement (the newest migration that defines it) with its arguments as
    parameters."""
    migration, source = claim_due_source()
    text = source.replace("{schema}", SCHEMA)
    body = text[text.index("RETURN QUERY") + len("RETURN QUERY") : text.index("END\n$$;")]
    body = body.strip().rstrip(";")
    for name, param in (
        ("queue = q\n", "queue = $1\n"),
        ("unrestricted(q)", "unrestricted($1)"),
        ("LIMIT n\n", "LIMIT $2\n"),
        ("lease_us::bigint", "$3::bigint"),
        ("claimed_by = worker,", "claimed_by = $4,"),
    ):
        if name not in body:
            raise RuntimeError(f"{migration}: the claim no longer has {name!r}")
        body = body.replace(name, param)
    return body


SESSION_SETTINGS = (  # claim_due()'s own SET clauses (migrations 0007-0009), for a session
    "SET plan_cache_mode = force_generic_plan",
    "SET enable_seqscan = off",
    "SET enable_hashjoin = off",
    "SET enable_mergejoin = off",
    "SET enable_sort = off",
)
NO_SET = "claim_due_no_set"


def _p50(values: Sequence[float]) -> float:
    return statistics.median(values)


def _p99(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


async def measure(base: str, rounds: int, idle_ms: float) -> None:
    admin = await asyncpg.connect(base)
    conn = await asyncpg.connect(base)
    tuned = await asyncpg.connect(base)  # claim_due()'s settings for the whole session
    try:
        for setting in SESSION_SETTINGS:
            await tuned.execute(setting)
        for statement in (SETUP, *REFILL):
            await admin.execute(statement)
        await admin.execute("CREATE TABLE IF NOT EXISTS idle_claim_beat (n bigint NOT NULL)")
        await admin.execute("TRUNCATE idle_claim_beat")
        await admin.execute("INSERT INTO idle_claim_beat VALUES (0)")
        minimal = MINIMAL_CLAIM.format(schema=CEILING_SCHEMA, limit=1)
        statement = _statement()
        async with PostgresStorage.from_url(base, schema=SCHEMA) as store:
            await store.migrate()
            await _copy_without_settings(admin)

            async def submitted() -> str:
                task = Envelope(id=uuid.uuid4().hex, queue=QUEUE, handler_ref="h")
                await store.enqueue(task)
                return task.id

            async def raw_claim(
                on: asyncpg.Connection, sql: str, *args: object
            ) -> Callable[[], Awaitable[str]]:
                await submitted()

                async def claim() -> str:
                    rows = await on.fetch(sql, *args)
                    if len(rows) != 1:
                        raise RuntimeError(f"{sql[:40]!r} claimed {len(rows)} tasks, not 1")
                    return str(rows[0]["token"]) + " " + rows[0]["id"]

                return claim

            async def store_claim() -> Callable[[], Awaitable[str]]:
                await submitted()

                async def claim() -> str:
                    claimed = await store.claim_due(QUEUE, 1, LEASE, worker_id="experiment")
                    if len(claimed) != 1:
                        raise RuntimeError(f"the store claimed {len(claimed)} tasks, not 1")
                    return claimed[0].token + " " + claimed[0].task.id

                return claim

            async def plain(sql: str) -> Callable[[], Awaitable[str]]:
                async def run() -> str:
                    await conn.execute(sql)
                    return ""

                return run

            prepare: dict[str, Callable[[], Awaitable[Callable[[], Awaitable[str]]]]] = {
                "round trip": lambda: plain("SELECT 1"),
                "durable commit": lambda: plain("UPDATE idle_claim_beat SET n = n + 1"),
                "minimal claim": lambda: plain(minimal),
                "the statement alone": lambda: raw_claim(
                    tuned, statement, QUEUE, 1, 30_000_000, "experiment"
                ),
                "claim_due(), no SET": lambda: raw_claim(
                    tuned, CLAIM_DUE.replace("claim_due(", f"{NO_SET}("), QUEUE
                ),
                "claim_due()": lambda: raw_claim(conn, CLAIM_DUE, QUEUE),
                "the store's claim_due": store_claim,
            }
            for step in STEPS:  # every statement prepared on its connection before the clock
                claim = await (await prepare[step]())()
                if claim:
                    await _complete(store, claim)
            wall: dict[str, list[float]] = {step: [] for step in STEPS}
            cpu: dict[str, list[float]] = {step: [] for step in STEPS}
            print(f"{rounds:,} rounds, {idle_ms:g} ms idle before each step")
            for round_ in range(rounds):
                shift = round_ % len(STEPS)
                for step in STEPS[shift:] + STEPS[:shift]:
                    call = await prepare[step]()
                    await asyncio.sleep(idle_ms / 1000)
                    cpu_started, started = time.process_time(), time.perf_counter()
                    claim = await call()
                    wall[step].append((time.perf_counter() - started) * 1e3)
                    cpu[step].append((time.process_time() - cpu_started) * 1e6)
                    if claim:
                        await _complete(store, claim)
            print(f"{'step':<24}{'p50 ms':>8}{'p99 ms':>8}{'client CPU µs':>15}")
            for step in STEPS:
                print(
                    f"{step:<24}{_p50(wall[step]):>8.3f}{_p99(wall[step]):>8.3f}"
                    f"{_p50(cpu[step]):>15.0f}"
                )
            p50 = {step: _p50(wall[step]) for step in STEPS}
            print("differences of the p50s (ms):")
            for later, earlier in zip(STEPS[1:], STEPS[:-1], strict=True):
                print(f"  {later} - {earlier}: {p50[later] - p50[earlier]:+.3f}")
            await admin.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
            await admin.execute(f"DROP SCHEMA {CEILING_SCHEMA} CASCADE")
            await admin.execute("DROP TABLE idle_claim_beat")
    finally:
        await tuned.close()
        await conn.close()
        await admin.close()


async def _copy_without_settings(admin: asyncpg.Connection) -> None:
    """claim_due() under another name, without its SET clauses (its caller's session sets
    them instead)."""
    source: str = await admin.fetchval(
        f"SELECT pg_get_functiondef('{SCHEMA}.claim_due(text, bigint, bigint, text)'::regprocedure)"
    )
    await admin.execute(source.replace(f"{SCHEMA}.claim_due(", f"{SCHEMA}.{NO_SET}(", 1))
    await admin.execute(f"ALTER FUNCTION {SCHEMA}.{NO_SET}(text, bigint, bigint, text) RESET ALL")


async def _complete(store: PostgresStorage, claim: str) -> None:
    token, task_id = claim.split(" ", 1)
    attempt = Attempt(number=1, outcome=Outcome.SUCCEEDED, finished_at=datetime.now(UTC))
    await store.complete(task_id, token, attempt)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing PostgreSQL (default: a throwaway cluster)")
    parser.add_argument("--rounds", type=int, default=600, help="rounds (one call of each step)")
    parser.add_argument("--idle", type=float, default=25, help="ms of quiet before each step")
    args = parser.parse_args()
    with postgres(args.url) as base:
        asyncio.run(measure(base, args.rounds, args.idle))


if __name__ == "__main__":
    main()
