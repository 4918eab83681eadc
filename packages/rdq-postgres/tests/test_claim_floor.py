"""The claim floor (schema version 14): claims start at a due time no live task of the queue
is due before, raised by the claims themselves and lowered by every write that makes a task
due before it; exact even while writes and claims race, and the reason the claim keeps its
pace while a transaction elsewhere holds the xmin horizon.

The kit's clauses ``DueEarlierClauses`` check the promise through the SPI; these tests check
the mechanism: the floor is raised, each raise waits for the writers in progress, a rolled
back claim takes its raise with it, and a held horizon leaves the claim's scan short.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import asyncpg
import pytest

from rdq.spi import QUEUE_KEY, Attempt, Completion, Control, Dedup, DedupMode, Envelope, Outcome
from rdq_postgres import PostgresStorage

from .conftest import ClaimPlan

LEASE = timedelta(minutes=5)
DONE = Attempt(number=1, outcome=Outcome.SUCCEEDED)


async def _due(storage: PostgresStorage, queue: str, ages: list[float]) -> list[str]:
    """One task per age (seconds overdue, oldest first); their ids in claim order."""
    now = await storage.now()
    tasks = [
        Envelope(
            id=f"{queue}-{n:04d}",
            queue=queue,
            handler_ref="h",
            next_attempt_at=now - timedelta(seconds=age),
        )
        for n, age in enumerate(sorted(ages, reverse=True))
    ]
    assert await storage.enqueue_batch(tasks) == [True] * len(tasks)
    return [t.id for t in tasks]


async def _floor(conn: asyncpg.Connection, schema: str, queue: str) -> datetime:
    floor: datetime = await conn.fetchval(f'SELECT "{schema}".claim_floor($1)', queue)
    return floor


@pytest.mark.asyncio
async def test_claims_raise_the_floor_to_the_oldest_task_left_and_the_scan_starts_there(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    ids = await _due(storage, "q", [50, 40, 30, 20, 10])
    conn = await asyncpg.connect(postgres_url)
    try:
        unraised = f"SELECT \"{schema}\".claim_floor($1) = '-infinity'"
        assert await conn.fetchval(unraised, "q"), "no claim yet: no floor"
        sql = f'SELECT id FROM "{schema}".claim_due($1, $2, $3, $4)'
        first = [r["id"] for r in await conn.fetch(sql, "q", 2, 300_000_000, "w")]
        assert sorted(first) == ids[:2]
        third = (await storage.get(ids[2])).next_attempt_at
        # this connection's own floor: the oldest due task left
        assert await _floor(conn, schema, "q") == third
        assert [r["id"] for r in await conn.fetch(sql, "q", 1, 300_000_000, "w")] == [ids[2]]
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_a_raise_waits_for_a_write_in_progress_and_the_task_it_wrote_goes_first(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """A task admitted in an open transaction, due at that transaction's start, is invisible
    to the claims until it commits; the raises meanwhile find the queue's lock held and
    leave the floor where it was, so the first claim after the commit takes the task before
    the younger ones. (Without the lock a raise would move the floor past it.)"""
    now = await storage.now()
    younger = [
        Envelope(
            id=f"young-{n}",
            queue="q",
            handler_ref="h",
            next_attempt_at=now + timedelta(milliseconds=300 + 10 * n),
        )
        for n in range(4)
    ]
    await storage.enqueue_batch(younger)
    app = await asyncpg.connect(postgres_url)
    claims = await asyncpg.connect(postgres_url)
    sql = f'SELECT id FROM "{schema}".claim_due($1, $2, $3, $4)'
    try:
        async with app.transaction():
            # due at this transaction's start, which is before the younger tasks' due times
            await storage.enqueue_in(app, [Envelope(id="in-tx", queue="q", handler_ref="h")])
            begun = await app.fetchval("SELECT now()")
            assert begun < younger[0].next_attempt_at  # type: ignore[operator]
            await asyncio.sleep(0.45)  # the younger tasks fall due meanwhile
            taken = [r["id"] for r in await claims.fetch(sql, "q", 1, 300_000_000, "w")]
            assert taken == ["young-0"]  # the task in the open transaction is not visible
            taken = [r["id"] for r in await claims.fetch(sql, "q", 1, 300_000_000, "w")]
            assert taken == ["young-1"]
        taken = [r["id"] for r in await claims.fetch(sql, "q", 1, 300_000_000, "w")]
        assert taken == ["in-tx"], "the task committed after the raises goes first"
    finally:
        await app.close()
        await claims.close()


@pytest.mark.asyncio
async def test_a_claim_rolled_back_takes_its_raise_with_it(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    ids = await _due(storage, "q", [30, 20, 10])
    conn = await asyncpg.connect(postgres_url)
    sql = f'SELECT id FROM "{schema}".claim_due($1, $2, $3, $4)'
    try:
        tx = conn.transaction()
        await tx.start()
        assert sorted(r["id"] for r in await conn.fetch(sql, "q", 2, 300_000_000, "w")) == ids[:2]
        await tx.rollback()
        assert [r["id"] for r in await conn.fetch(sql, "q", 1, 300_000_000, "w")] == [ids[0]]
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_every_write_that_makes_a_task_due_before_the_floor_lowers_it(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """Each write path (through the store's statements, which the Java binding runs too)
    lowers the queue's floor when it makes a task due before it, and leaves the floor's row
    alone when the task is due at the write's own time."""
    conn = await asyncpg.connect(postgres_url)
    try:

        async def gen() -> int:
            value: int = await conn.fetchval(
                f'SELECT gen FROM "{schema}".claim_floor WHERE queue = $1', "q"
            )
            return value

        await _due(storage, "q", [5])
        await storage.claim_due("q", 1, LEASE)  # the floor's row exists from the first raise
        start = await gen()
        await storage.enqueue(Envelope(id="now", queue="q", handler_ref="h"))
        assert await gen() == start, "a task due now lowers nothing"
        past = (await storage.now()) - timedelta(hours=1)
        await storage.enqueue(Envelope(id="past", queue="q", handler_ref="h", next_attempt_at=past))
        assert await gen() != start
        low: datetime = await conn.fetchval(
            f'SELECT low FROM "{schema}".claim_floor WHERE queue = $1', "q"
        )
        assert low <= past
        lowered = await gen()
        earlier = past - timedelta(minutes=1)
        admitted = Envelope(id="admitted", queue="q", handler_ref="h", next_attempt_at=earlier)
        assert (await storage.admit(admitted, Dedup(key="floor-key"))).task_id == "admitted"
        assert await gen() != lowered, "admit_task() lowers it for the task it adds"
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_a_debounce_in_a_transaction_begun_before_a_raise_lowers_the_floor(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """A debounce makes its holder due at its transaction's start at the earliest; a
    transaction that began before a claim raised the floor past that start lowers the floor
    to it (admit_task() calls lower_floor()), so the holder is the next claim, not one
    floor_rescan() later."""
    key = Dedup(key="debounced", mode=DedupMode.DEBOUNCE, max_age=3600.0)
    holder = Envelope(id="holder", queue="q", handler_ref="h")
    await storage.admit(holder, key, delay=timedelta(days=1))
    ids = await _due(storage, "q", [40, 30])
    app = await asyncpg.connect(postgres_url)
    claims = await asyncpg.connect(postgres_url)
    sql = f'SELECT id FROM "{schema}".claim_due($1, $2, $3, $4)'
    admit = (
        f'SELECT outcome, task_id FROM "{schema}".admit_task('
        "p_key => $1, p_mode => 'debounce', p_window_us => NULL,"
        " p_max_age_us => 3600000000, p_id => 'second', p_queue => 'q', p_handler_ref => 'h',"
        """ p_payload => '{"v": 2}', p_headers => '{}', p_attempt_count => 0,"""
        " p_redrive_count => 0, p_attempts => '[]', p_error_type => NULL,"
        " p_next_attempt_at => now() - interval '1 hour', p_delay_us => NULL, p_retry => NULL,"
        " p_format_version => 1, p_extra => '{}', p_priority => 0::smallint, p_keys => '{}')"
    )
    try:
        async with app.transaction():
            begun = await app.fetchval("SELECT now()")
            await asyncio.sleep(0.3)
            taken = [r["id"] for r in await claims.fetch(sql, "q", 2, 300_000_000, "w")]
            assert sorted(taken) == ids
            assert await _floor(claims, schema, "q") > begun, "raised past the open transaction"
            row = await app.fetchrow(admit, "debounced")
            assert (row["outcome"], row["task_id"]) == ("replaced", "holder")
        assert (await storage.get("holder")).next_attempt_at == begun
        taken = [r["id"] for r in await claims.fetch(sql, "q", 1, 300_000_000, "w")]
        assert taken == ["holder"], "the debounced holder is due before the raised floor"
    finally:
        await app.close()
        await claims.close()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "control",
    [
        {"concurrency": 1000},  # due_unblocked(), the control locked FOR SHARE under a stripe
        {"gate": 1000},  # due_unblocked(), the control locked FOR UPDATE
        {"fair": "tenant:"},  # ordered_candidates(), by group
        {"aging": 60.0},  # ordered_candidates(), the queue one group
    ],
    ids=["concurrency", "gate", "fair", "aging"],
)
async def test_a_controlled_claim_starts_at_the_floor_and_raises_it(
    storage: PostgresStorage, postgres_url: str, schema: str, control: dict[str, object]
) -> None:
    """claim_controlled() (migration 0013's, with the floor): its reads start at the queue's
    floor, it raises the floor after a claim, and a task made due before the floor is the
    next one it claims."""
    limit = Control(queue="q", key=QUEUE_KEY, **control)  # type: ignore[arg-type]
    await storage.put_control(limit, expected_version=0)
    ids = await _due(storage, "q", [50, 40, 30, 20, 10])
    conn = await asyncpg.connect(postgres_url)
    sql = f'SELECT (claimed).id FROM "{schema}".claim_controlled($1, $2, $3, $4)'

    async def claim(n: int) -> list[str]:
        return [r["id"] for r in await conn.fetch(sql, "q", n, 300_000_000, "w")]

    try:
        assert await claim(2) == ids[:2]
        assert await _floor(conn, schema, "q") == (await storage.get(ids[2])).next_attempt_at
        past = (await storage.now()) - timedelta(hours=1)
        await storage.enqueue(Envelope(id="late", queue="q", handler_ref="h", next_attempt_at=past))
        assert await claim(1) == ["late"]
        assert await claim(3) == ids[2:]
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_the_floor_keeps_what_migrations_0011_and_0013_made_of_the_functions_it_replaces(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """Migration 0014 replaces functions that 0011 (admit_task) and 0013 (claim_controlled,
    due_unblocked, ordered_candidates) wrote last: each keeps their body and settings, with
    the floor added, and 0013's dropped index stays dropped."""
    conn = await asyncpg.connect(postgres_url)
    try:
        rows = await conn.fetch(
            "SELECT p.proname, coalesce(p.proconfig, '{}') AS config, p.prosrc FROM pg_proc AS p"
            " JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE n.nspname = $1",
            schema,
        )
        functions = {r["proname"]: r for r in rows}
        for name in ("claim_controlled", "due_unblocked", "ordered_candidates", "raise_floor"):
            config = functions[name]["config"]
            assert "jit=off" in config and "plan_cache_mode=force_generic_plan" in config, name
        controlled = functions["claim_controlled"]["prosrc"]
        assert "due_unblocked(" in controlled and "ordered_candidates(" in controlled
        assert "stripes CONSTANT" in controlled and "raise_floor(q)" in controlled
        for name in ("due_unblocked", "ordered_candidates", "claim_due"):
            assert "claim_floor(q)" in functions[name]["prosrc"], name
        assert "raise_floor(q)" in functions["claim_due"]["prosrc"]
        admit = functions["admit_task"]["prosrc"]
        assert (
            admit.count("lower_floor(") == 2 and "pg_advisory_xact_lock(hashtextextended" in admit
        )
        dropped = await conn.fetchval(
            "SELECT to_regclass($1)", f'"{schema}".task_in_flight_keys_idx'
        )
        assert dropped is None
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_a_held_horizon_leaves_the_claims_scan_short(
    storage: PostgresStorage, postgres_url: str, schema: str, claim_plan: ClaimPlan
) -> None:
    """While a transaction holds the xmin horizon, 3,000 tasks claimed and completed leave
    their index entries in front of the queue's oldest due task; the claim's scan starts at
    the floor, past them (on schema 10 it read every one)."""
    ids = await _due(storage, "q", [400 - n / 10 for n in range(3_500)])
    holder = await asyncpg.connect(postgres_url)
    conn = await asyncpg.connect(postgres_url)
    try:
        await holder.execute("BEGIN")
        await holder.fetchval("SELECT txid_current()")
        sql = f'SELECT id, token FROM "{schema}".claim_due($1, $2, $3, $4)'
        for _ in range(30):
            rows = await conn.fetch(sql, "q", 100, 300_000_000, "w")
            await storage.complete_many([Completion(r["id"], r["token"], DONE) for r in rows])
        nodes = await claim_plan(storage, "q", 10, on=conn)
        scan = next(n for n in nodes if n.get("Index Name") == "task_claim_priority_idx")
        read = scan["Shared Hit Blocks"] + scan["Shared Read Blocks"]
        assert read < 60, f"the claim's scan read {read} pages: it walked the claimed entries"
        assert [r["id"] for r in await conn.fetch(sql, "q", 1, 300_000_000, "w")] == [ids[3_000]]
    finally:
        await holder.execute("ROLLBACK")
        await holder.close()
        await conn.close()


@pytest.mark.asyncio
async def test_a_task_written_without_lowering_the_floor_is_found_by_the_next_read_below_it(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """A writer that does not call lower_floor() (a binding of an earlier schema version, SQL
    written by hand) leaves a due task under the floor; once every floor_rescan() a raise
    reads the queue below the floor, finds it and lowers the floor, so it is claimed next
    rather than never."""
    ids = await _due(storage, "q", [40, 30, 20, 10])
    conn = await asyncpg.connect(postgres_url)
    sql = f'SELECT id FROM "{schema}".claim_due($1, $2, $3, $4)'

    async def claim() -> list[str]:
        return [r["id"] for r in await conn.fetch(sql, "q", 1, 300_000_000, "w")]

    try:
        assert await claim() == [ids[0]]  # the floor's row made
        assert await claim() == [ids[1]]  # and read below the floor: nothing there
        await conn.execute(
            f'INSERT INTO "{schema}".task (id, queue, handler_ref, status, next_attempt_at)'
            " VALUES ('stray', 'q', 'h', 'PENDING', now() - interval '1 hour')"
        )
        assert await claim() == [ids[2]], "within floor_rescan() of the last read: passed over"
        # as though floor_rescan() had passed: the raise after the next claim reads below
        await conn.execute(f"UPDATE \"{schema}\".claim_floor SET scanned_at = '-infinity'")
        assert await claim() == [ids[3]]
        assert await claim() == ["stray"]
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_a_claim_never_waits_for_the_floor_row_a_claim_in_an_open_transaction_holds(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """A raise leaves the floor's row alone while another claim's open transaction holds it
    (made, published or stamped by that claim's raise): the claims beside it run, as
    migration 0013's claims of a limit with room do, rather than wait for that commit."""
    await storage.enqueue_batch(
        [Envelope(id=f"t-{n:02d}", queue="q", handler_ref="h") for n in range(20)]
    )
    await asyncio.sleep(0.1)  # due, and no floor row yet (they were due at their admission)
    conn = await asyncpg.connect(postgres_url)
    sql = f'SELECT id FROM "{schema}".claim_due($1, $2, $3, $4)'
    try:
        async with conn.transaction():
            assert len(await conn.fetch(sql, "q", 1, 300_000_000, "w")) == 1  # makes the row
            for _ in range(3):
                claimed = await asyncio.wait_for(storage.claim_due("q", 1, LEASE), timeout=5)
                assert len(claimed) == 1
        await conn.execute(
            f"UPDATE \"{schema}\".claim_floor SET raised_at = '-infinity', scanned_at = '-infinity'"
        )
        async with conn.transaction():
            assert len(await conn.fetch(sql, "q", 1, 300_000_000, "w")) == 1  # stamps the row
            for _ in range(3):
                claimed = await asyncio.wait_for(storage.claim_due("q", 1, LEASE), timeout=5)
                assert len(claimed) == 1
    finally:
        await conn.close()
