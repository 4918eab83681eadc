"""The lease floor (schema version 17): a count of a queue's live leases starts at an end no
live lease of the queue has before it, raised by the stores that claim the queue under a
control and lowered by every write of a lease that ends before it; so a limit stays exact
with leases of any length, and its count keeps short while a transaction elsewhere holds
the xmin horizon.

The kit checks through the SPI that a concurrency limit is never exceeded; these tests check
that each kind of lease writer lowers the floor (without it, each test's last claim would
take a third slot of a limit of two) and that the floor is raised.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import asyncpg
import pytest

from rdq.spi import QUEUE_KEY, Attempt, Completion, Control, Envelope, Outcome, Status
from rdq_postgres import PostgresStorage
from rdq_postgres._claims import LEASE_FLOOR_RAISE_EVERY

LONG = timedelta(minutes=10)
SHORT = timedelta(seconds=20)
DONE = Attempt(number=1, outcome=Outcome.SUCCEEDED)


async def _limited(storage: PostgresStorage, queue: str, tasks: int, limit: int) -> None:
    await storage.enqueue_batch(
        [Envelope(id=f"{queue}-{n}", queue=queue, handler_ref="h") for n in range(tasks)]
    )
    await storage.put_control(
        Control(queue=queue, key=QUEUE_KEY, concurrency=limit), expected_version=0
    )


async def _lease_floor(postgres_url: str, schema: str, queue: str) -> datetime | None:
    conn = await asyncpg.connect(postgres_url)
    try:
        low: datetime | None = await conn.fetchval(
            f'SELECT low FROM "{schema}".lease_floor WHERE queue = $1', queue
        )
        return low
    finally:
        await conn.close()


async def _raised_past(
    storage: PostgresStorage, postgres_url: str, schema: str, queue: str, end: datetime
) -> None:
    """Let the store's next claim raise the floor, and check that it reached ``end``."""
    await asyncio.sleep(LEASE_FLOOR_RAISE_EVERY + 0.1)  # the store's and the schema's pace
    assert await storage.claim_due(queue, 1, LONG) == [], "the limit is used up"
    assert await _lease_floor(postgres_url, schema, queue) == end, "the floor was not raised"


@pytest.mark.asyncio
async def test_a_shorter_lease_claimed_after_a_raise_still_holds_its_slot(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    await _limited(storage, "q", 4, limit=2)
    [first] = await storage.claim_due("q", 1, LONG)
    [second] = await storage.claim_due("q", 1, LONG)
    ends = [first.task.lease_expires_at, second.task.lease_expires_at]
    assert ends[0] is not None and ends[1] is not None
    await storage.complete(second.task.id, second.token, DONE)
    await asyncio.sleep(LEASE_FLOOR_RAISE_EVERY + 0.1)
    [third] = await storage.claim_due("q", 1, SHORT)  # its store raised the floor first
    assert await _lease_floor(postgres_url, schema, "q") == third.task.lease_expires_at
    # `third` ends before `first`: the floor under both
    assert third.task.lease_expires_at is not None
    assert third.task.lease_expires_at < ends[0]
    assert await storage.claim_due("q", 1, LONG) == [], "two live leases: the limit is used up"


@pytest.mark.asyncio
async def test_a_lease_extended_to_an_earlier_end_still_holds_its_slot(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    await _limited(storage, "q", 3, limit=2)
    [first] = await storage.claim_due("q", 1, LONG)
    assert len(await storage.claim_due("q", 1, LONG)) == 1
    assert first.task.lease_expires_at is not None
    await _raised_past(storage, postgres_url, schema, "q", first.task.lease_expires_at)
    await storage.extend_lease(first.task.id, first.token, SHORT)
    assert await storage.claim_due("q", 1, LONG) == [], "two live leases: the limit is used up"
    assert await _lease_floor(postgres_url, schema, "q") < first.task.lease_expires_at


@pytest.mark.asyncio
async def test_an_imported_lease_that_ends_before_the_floor_holds_its_slot(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    await _limited(storage, "q", 4, limit=2)
    [first] = await storage.claim_due("q", 1, LONG)
    [second] = await storage.claim_due("q", 1, LONG)
    assert first.task.lease_expires_at is not None
    await _raised_past(storage, postgres_url, schema, "q", first.task.lease_expires_at)
    await storage.complete_many([Completion(c.task.id, c.token, DONE) for c in (first, second)])
    now = await storage.now()
    leased = Envelope(
        id="copied",
        queue="q",
        handler_ref="h",
        status=Status.IN_FLIGHT,
        created_at=now,
        claimed_at=now,
        lease_expires_at=now + SHORT,
    )
    assert await storage.import_tasks([leased]) == [True]
    [third] = await storage.claim_due("q", 1, LONG)
    assert third.task.id != "copied"
    assert await storage.claim_due("q", 1, LONG) == [], "two live leases: the limit is used up"


@pytest.mark.asyncio
async def test_a_lease_written_without_lowering_the_floor_is_counted_after_the_next_rescan(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """A writer that does not call lower_lease_floor() (a binding of schema 16 or older)
    may end a lease before the floor; once every lease_floor_rescan() a raise reads the live
    leases below the floor and lowers it, so such a lease is counted again."""
    await _limited(storage, "q", 4, limit=2)
    [first] = await storage.claim_due("q", 1, LONG)
    [second] = await storage.claim_due("q", 1, LONG)
    assert first.task.lease_expires_at is not None
    await _raised_past(storage, postgres_url, schema, "q", first.task.lease_expires_at)
    conn = await asyncpg.connect(postgres_url)
    try:  # schema 16's extension of `first`: no lowering
        await conn.execute(
            f"UPDATE \"{schema}\".task SET lease_expires_at = now() + interval '20 seconds'"
            " WHERE id = $1",
            first.task.id,
        )
        await storage.complete(second.task.id, second.token, DONE)
        # `second`'s slot is free again: one claim takes it, whether `first` counts or not
        assert len(await storage.claim_due("q", 1, LONG)) == 1
        await conn.execute(f"UPDATE \"{schema}\".lease_floor SET scanned_at = '-infinity'")
        await asyncio.sleep(LEASE_FLOOR_RAISE_EVERY + 0.1)
        assert await storage.claim_due("q", 1, LONG) == [], "the stray lease counted again"
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_a_held_horizon_leaves_the_count_of_live_leases_short(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """While a transaction holds the xmin horizon, 1,000 tasks claimed and completed under a
    limit that never binds leave their entries in the range of live leases; the count starts
    at the floor, past them (on schema 16 every count read all of them)."""
    await _limited(storage, "q", 1_100, limit=5_000)
    holder = await asyncpg.connect(postgres_url)
    conn = await asyncpg.connect(postgres_url)
    try:
        await holder.execute("BEGIN")
        await holder.fetchval("SELECT txid_current()")
        for _ in range(10):
            claimed = await storage.claim_due("q", 100, LONG)
            await storage.complete_many([Completion(c.task.id, c.token, DONE) for c in claimed])
        await asyncio.sleep(LEASE_FLOOR_RAISE_EVERY + 0.1)
        [live] = await storage.claim_due("q", 1, LONG)  # its store raised the floor first
        async with conn.transaction():
            assert await conn.fetchval(f'SELECT "{schema}".live_leases($1, $2)', "q", "*") == 1
            read = await conn.fetchval(
                "SELECT pg_stat_get_xact_tuples_returned($1::regclass)",
                f'"{schema}".task_live_idx',
            )
        assert read < 50, f"the count read {read} entries: it walked the completed leases"
        assert live.task.lease_expires_at is not None
    finally:
        await holder.execute("ROLLBACK")
        await holder.close()
        await conn.close()


@pytest.mark.asyncio
async def test_claims_with_leases_of_every_length_racing_the_raises_never_pass_the_limit(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """Eight stores claim and complete under Concurrency(6) for three seconds, each claim's
    lease drawn from three lengths (so a lease often ends before leases taken earlier), each
    store raising the floor once a second; after every claim the queue's live leases,
    counted without the floor, are never more than the limit."""
    limit = 6
    await _limited(storage, "q", 3_000, limit=limit)
    stores = [PostgresStorage.from_url(postgres_url, schema=schema) for _ in range(8)]
    leases = [timedelta(seconds=15), timedelta(minutes=1), LONG]
    live = f"""SELECT count(*) FROM "{schema}".task
               WHERE queue = 'q' AND status = 'IN_FLIGHT' AND lease_expires_at > now()"""
    seen: list[int] = []
    pool = await asyncpg.create_pool(postgres_url, min_size=1, max_size=8)

    async def work(n: int, store: PostgresStorage) -> int:
        took = 0
        stop = asyncio.get_running_loop().time() + 3
        while asyncio.get_running_loop().time() < stop:
            claimed = await store.claim_due("q", 2, leases[(n + took) % 3])
            took += len(claimed)
            seen.append(await pool.fetchval(live))
            await asyncio.sleep(0.005 * (n % 3))
            await store.complete_many([Completion(c.task.id, c.token, DONE) for c in claimed])
        return took

    try:
        await asyncio.gather(*(s.connect() for s in stores))
        took = await asyncio.gather(*(work(n, s) for n, s in enumerate(stores)))
        raised = await pool.fetchval(f'SELECT raised_at FROM "{schema}".lease_floor')
    finally:
        await asyncio.gather(*(s.aclose() for s in stores))
        await pool.close()
    assert sum(took) > 100, "the stores claimed too little to race"
    assert max(seen) <= limit, f"{max(seen)} live leases under Concurrency({limit})"
    assert max(seen) == limit, "the limit never bound: nothing raced for its last slot"
    assert raised is not None
