"""Claims of a rate limit side by side (schema version 20): a claim takes the tokens it may use
from the bucket's sequence at once, under a lock held for that alone, and locks the control
only FOR SHARE, so the claims of one bucket no longer wait for each other's commits; between
them they still take no more than the bucket holds (a claim whose tokens another took while
it chose its tasks puts back what it cannot run), and the lock is never left held, not by a
claim cancelled while it waits for it.

The kit checks through the SPI that a rate limit lets through what its bucket holds; these
tests check that claims beside an open one neither wait nor take more."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest
import pytest_asyncio

from rdq.spi import QUEUE_KEY, Control, Envelope
from rdq_postgres import PostgresStorage

LEASE = timedelta(minutes=10)
PER_HOUR = 3600.0
"""A rate per hour: no token refills within a test."""


@pytest_asyncio.fixture
async def open_claim(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to hold a claim's transaction open with."""
    conn = await asyncpg.connect(postgres_url)
    try:
        yield conn
    finally:
        await conn.close()


async def _claim_in(conn: asyncpg.Connection, schema: str, queue: str, n: int) -> int:
    """Claim in ``conn`` (its open transaction, if any); how many tasks it took."""
    count: int = await conn.fetchval(
        f'SELECT count(*) FROM "{schema}".claim_controlled($1, $2, $3, NULL)'
        " WHERE (claimed).id IS NOT NULL",
        queue,
        n,
        int(LEASE.total_seconds() * 1e6),
    )
    return count


async def _fill(storage: PostgresStorage, queue: str, tasks: int, start: int = 0) -> None:
    await storage.enqueue_batch(
        [
            Envelope(id=f"{queue}-{n}", queue=queue, handler_ref="h", keys=["limit:api"])
            for n in range(start, start + tasks)
        ]
    )


async def _advisory_locks(conn: asyncpg.Connection, pid: int) -> int:
    held: int = await conn.fetchval(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 AND granted",
        pid,
    )
    return held


@pytest.mark.asyncio
@pytest.mark.parametrize("key", [QUEUE_KEY, "limit:api"])
async def test_a_claim_beside_an_open_claim_of_a_rate_does_not_wait_for_it(
    storage: PostgresStorage, open_claim: asyncpg.Connection, schema: str, key: str
) -> None:
    await _fill(storage, "q", 100)
    await storage.put_control(
        Control(queue="q", key=key, rate=1_000_000, burst=1_000_000), expected_version=0
    )
    async with open_claim.transaction():
        assert await _claim_in(open_claim, schema, "q", 10) == 10
        claimed = await asyncio.wait_for(storage.claim_due("q", 10, LEASE), timeout=5)
        assert len(claimed) == 10


@pytest.mark.asyncio
@pytest.mark.parametrize("key", [QUEUE_KEY, "limit:api"])
async def test_claims_side_by_side_take_no_more_than_the_bucket_holds(
    storage: PostgresStorage, open_claim: asyncpg.Connection, schema: str, key: str
) -> None:
    await _fill(storage, "q", 20)
    await storage.put_control(
        Control(queue="q", key=key, rate=5, per=PER_HOUR, burst=5), expected_version=0
    )
    async with open_claim.transaction():
        assert await _claim_in(open_claim, schema, "q", 3) == 3
        beside = await asyncio.wait_for(storage.claim_due("q", 10, LEASE), timeout=5)
        assert len(beside) == 2, "the open claim's three tokens are spent"
    assert await storage.claim_due("q", 10, LEASE) == []


@pytest.mark.asyncio
async def test_tokens_taken_and_spent_stay_spent_when_the_claim_rolls_back(
    storage: PostgresStorage, open_claim: asyncpg.Connection, schema: str
) -> None:
    await _fill(storage, "q", 20)
    await storage.put_control(
        Control(queue="q", key=QUEUE_KEY, rate=5, per=PER_HOUR, burst=5), expected_version=0
    )
    tr = open_claim.transaction()
    await tr.start()
    assert await _claim_in(open_claim, schema, "q", 3) == 3
    await tr.rollback()
    assert len(await storage.claim_due("q", 10, LEASE)) == 2, "fewer claims, never more"


@pytest.mark.asyncio
async def test_a_claim_takes_the_tokens_of_the_tasks_it_claims_only(
    storage: PostgresStorage,
) -> None:
    await _fill(storage, "q", 2)
    await storage.put_control(
        Control(queue="q", key="limit:api", rate=5, per=PER_HOUR, burst=5), expected_version=0
    )
    assert len(await storage.claim_due("q", 10, LEASE)) == 2
    await _fill(storage, "q", 10, start=2)
    assert len(await storage.claim_due("q", 10, LEASE)) == 3, "5 tokens, 2 of them taken"
    assert await storage.claim_due("q", 10, LEASE) == []


async def _waiting_for_advisory_lock(conn: asyncpg.Connection) -> bool:
    waiting: bool = await conn.fetchval(
        "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)"
    )
    return waiting


@pytest.mark.asyncio
async def test_a_claim_whose_tokens_were_taken_meanwhile_puts_back_what_it_cannot_run(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """The claim reads 5 tokens and chooses 5 tasks; before it takes their tokens, another
    session takes 3 (as a claim beside it would): it claims 2 and leaves the other 3 due."""
    await _fill(storage, "q", 20)
    await storage.put_control(
        Control(queue="q", key=QUEUE_KEY, rate=5, per=PER_HOUR, burst=5), expected_version=0
    )
    holder = await asyncpg.connect(postgres_url)
    try:
        # the bucket's lock (migration 0020), held by another session
        await holder.execute("SELECT pg_advisory_lock(hashtext($1 || chr(31) || $2), -1)", "q", "*")
        claim = asyncio.ensure_future(storage.claim_due("q", 5, LEASE))
        for _ in range(100):
            if await _waiting_for_advisory_lock(holder):
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the claim never reached the bucket's lock")
        # three tokens taken: the arrival time 3 x 720 s ahead, less a minute for the time
        # since the claim began (a token is 720 s: the claim still finds 2 and a bit)
        await holder.execute(
            f'SELECT setval(to_regclass("{schema}".bucket_name($1, $2)),'
            " (extract(epoch FROM clock_timestamp()) * 1000000 + 3 * 720e6 - 60e6)::bigint)",
            "q",
            "*",
        )
        await holder.execute("SELECT pg_advisory_unlock_all()")
        assert len(await asyncio.wait_for(claim, timeout=5)) == 2
        in_flight = await holder.fetchval(
            f"SELECT count(*) FROM \"{schema}\".task WHERE status = 'IN_FLIGHT'"
        )
        assert in_flight == 2, "the three put back were left due"
        assert await storage.claim_due("q", 10, LEASE) == [], "the bucket is empty"
    finally:
        await holder.close()


@pytest.mark.asyncio
async def test_a_claim_cancelled_while_it_waits_for_the_bucket_leaves_no_lock_held(
    storage: PostgresStorage, open_claim: asyncpg.Connection, postgres_url: str, schema: str
) -> None:
    await _fill(storage, "q", 10)
    await storage.put_control(
        Control(queue="q", key=QUEUE_KEY, rate=1_000_000, burst=1_000_000), expected_version=0
    )
    holder = await asyncpg.connect(postgres_url)
    try:
        # the bucket's lock (migration 0020), held by another session
        await holder.execute("SELECT pg_advisory_lock(hashtext($1 || chr(31) || $2), -1)", "q", "*")
        pid = await open_claim.fetchval("SELECT pg_backend_pid()")
        await open_claim.execute("SET statement_timeout = '300ms'")
        with pytest.raises(asyncpg.QueryCanceledError):
            await _claim_in(open_claim, schema, "q", 5)
        await holder.execute("SELECT pg_advisory_unlock_all()")
        assert await _advisory_locks(holder, pid) == 0
        assert await _claim_in(open_claim, schema, "q", 5) == 5
        assert await _advisory_locks(holder, pid) == 0, "a claim left its lock held"
        claimed = await asyncio.wait_for(storage.claim_due("q", 10, LEASE), timeout=5)
        assert len(claimed) == 5
    finally:
        await holder.close()
