"""How claims of a limited queue take their slots on PostgreSQL (schema versions 13, 15 and 16; the
kit checks that a limit is never exceeded): claims of a concurrency limit with ample room run
side by side (its control locked FOR SHARE, one of four advisory stripes each, each claim of at
most an eighth of the limit), claims that find a limit used up do not wait for each other, and
a claim near the limit, or larger than an eighth of it, takes the control FOR UPDATE, after
every claim beside it has committed, so it counts their leases."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest
import pytest_asyncio

from rdq.spi import QUEUE_KEY, Control, Envelope
from rdq_postgres import PostgresStorage

LEASE = timedelta(minutes=10)
STRIPES = 4
"""claim_controlled()'s advisory stripes (migration 0015)."""


def span(limit: int) -> int:
    """The most a claim under a stripe takes (stripe_span(), migration 0015)."""
    return max(32, limit // (2 * STRIPES))


SPAN = 32
"""The span of every limit up to 256."""


@pytest_asyncio.fixture
async def open_claim(postgres_url: str, schema: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to hold a claim's transaction open with."""
    conn = await asyncpg.connect(postgres_url)
    try:
        yield conn
    finally:
        await conn.close()


async def _claim_in(conn: asyncpg.Connection, schema: str, queue: str, n: int) -> int:
    """Claim in ``conn``'s open transaction; how many tasks it took."""
    count: int = await conn.fetchval(
        f'SELECT count(*) FROM "{schema}".claim_controlled($1, $2, $3, NULL)',
        queue,
        n,
        int(LEASE.total_seconds() * 1e6),
    )
    return count


async def _fill(storage: PostgresStorage, queue: str, tasks: int, key: str) -> None:
    for start in range(0, tasks, 500):
        await storage.enqueue_batch(
            [
                Envelope(id=f"{queue}-{n}", queue=queue, handler_ref="h", keys=["limit:psp"])
                for n in range(start, min(tasks, start + 500))
            ]
        )


@pytest.mark.asyncio
@pytest.mark.parametrize("key", [QUEUE_KEY, "limit:psp"])
async def test_a_claim_beside_an_open_claim_of_a_limit_with_room_does_not_wait_for_it(
    storage: PostgresStorage, open_claim: asyncpg.Connection, schema: str, key: str
) -> None:
    await _fill(storage, "q", 100, key)
    await storage.put_control(Control(queue="q", key=key, concurrency=1000), expected_version=0)
    async with open_claim.transaction():
        assert await _claim_in(open_claim, schema, "q", 10) == 10
        claimed = await asyncio.wait_for(storage.claim_due("q", 10, LEASE), timeout=5)
        assert len(claimed) == 10


@pytest.mark.asyncio
async def test_claims_that_find_a_limit_used_up_do_not_wait_for_each_other(
    storage: PostgresStorage, open_claim: asyncpg.Connection, schema: str
) -> None:
    await _fill(storage, "q", 100, "limit:psp")
    await storage.put_control(
        Control(queue="q", key="limit:psp", concurrency=5), expected_version=0
    )
    assert len(await storage.claim_due("q", 10, LEASE)) == 5
    async with open_claim.transaction():
        assert await _claim_in(open_claim, schema, "q", 10) == 0
        assert await asyncio.wait_for(storage.claim_due("q", 10, LEASE), timeout=5) == []


@pytest.mark.asyncio
@pytest.mark.parametrize("key", [QUEUE_KEY, "limit:psp"])
async def test_a_claim_near_the_limit_waits_for_the_claims_beside_it_and_counts_them(
    storage: PostgresStorage, open_claim: asyncpg.Connection, schema: str, key: str
) -> None:
    """The open claim takes SPAN slots side by side (room 172 >= STRIPES x SPAN); the next
    asks for more than SPAN, so it takes the control FOR UPDATE: it waits for the open one to
    commit and then takes exactly what is left."""
    limit = STRIPES * SPAN + 44
    assert span(limit) == SPAN
    await _fill(storage, "q", limit + 100, key)
    await storage.put_control(Control(queue="q", key=key, concurrency=limit), expected_version=0)
    tr = open_claim.transaction()
    await tr.start()
    try:
        assert await _claim_in(open_claim, schema, "q", SPAN) == SPAN
        exact = asyncio.ensure_future(storage.claim_due("q", 1000, LEASE))
        await asyncio.sleep(0.5)
        assert not exact.done(), "the exact claim waits for the one beside it"
    finally:
        await tr.commit()
    assert len(await asyncio.wait_for(exact, timeout=10)) == limit - SPAN
    assert await storage.claim_due("q", 10, LEASE) == []


@pytest.mark.asyncio
@pytest.mark.parametrize("key", [QUEUE_KEY, "limit:psp"])
async def test_claims_of_many_tasks_run_side_by_side_under_a_wide_limit(
    storage: PostgresStorage, open_claim: asyncpg.Connection, schema: str, key: str
) -> None:
    """A worker asks for its free slots and the tasks it keeps ahead (about a hundred): under
    Concurrency(1000) two such claims run side by side (a span of 125), where schema 13 made
    every claim of more than 32 wait for the one before it."""
    await _fill(storage, "q", 300, key)
    await storage.put_control(Control(queue="q", key=key, concurrency=1000), expected_version=0)
    assert span(1000) == 125
    async with open_claim.transaction():
        assert await _claim_in(open_claim, schema, "q", 100) == 100
        claimed = await asyncio.wait_for(storage.claim_due("q", 100, LEASE), timeout=5)
        assert len(claimed) == 100


@pytest.mark.asyncio
@pytest.mark.parametrize("key", [QUEUE_KEY, "limit:psp"])
async def test_a_claim_that_fits_beside_three_full_stripes_does_not_wait_below_half_the_limit(
    storage: PostgresStorage, open_claim: asyncpg.Connection, schema: str, key: str
) -> None:
    """Concurrency(400), span 50, 220 slots held: 180 free, less than half the limit (which
    schema 15 asked for before a stripe) but room for a claim of 10 beside three full
    stripes (3 x 50 + 10): the claim beside an open one takes its 10 without waiting."""
    limit = 400
    assert span(limit) == 50
    await _fill(storage, "q", 300, key)
    await storage.put_control(Control(queue="q", key=key, concurrency=limit), expected_version=0)
    assert len(await storage.claim_due("q", 220, LEASE)) == 220
    async with open_claim.transaction():
        assert await _claim_in(open_claim, schema, "q", 10) == 10
        claimed = await asyncio.wait_for(storage.claim_due("q", 10, LEASE), timeout=5)
        assert len(claimed) == 10


async def _claim_until_empty(store: PostgresStorage, n: int) -> int:
    """Claim ``n`` at a time until two claims in a row take nothing: how many were taken. One
    empty claim is not the end: a session that remembered room for a stripe, which others took
    since, takes nothing once, and its next claim counts first (schema 16). The store's pool
    hands one claimant the same connection each time (the last one given back)."""
    took = empty = 0
    while empty < 2:
        claimed = await store.claim_due("q", n, LEASE)
        took += len(claimed)
        empty = 0 if claimed else empty + 1
    return took


@pytest.mark.asyncio
@pytest.mark.parametrize("key", [QUEUE_KEY, "limit:psp"])
async def test_claims_of_a_whole_span_side_by_side_take_a_limit_exactly(
    storage: PostgresStorage, postgres_url: str, schema: str, key: str
) -> None:
    """Sixteen stores claim a span (50 of Concurrency(400)) at a time until nothing is left
    to take: four side by side while a claim fits beside three full spans, then one at a
    time; together exactly the limit, never more."""
    limit = 400
    await _fill(storage, "q", limit + 300, key)
    await storage.put_control(Control(queue="q", key=key, concurrency=limit), expected_version=0)
    stores = [PostgresStorage.from_url(postgres_url, schema=schema) for _ in range(16)]

    async def claim_until_empty(store: PostgresStorage) -> int:
        return await _claim_until_empty(store, span(limit))

    try:
        await asyncio.gather(*(s.connect() for s in stores))
        took = await asyncio.gather(*(claim_until_empty(s) for s in stores))
    finally:
        await asyncio.gather(*(s.aclose() for s in stores))
    assert sum(took) == limit
    (control,) = [c for c in await storage.list_controls("q") if c.key == key]
    assert control.in_use == limit


@pytest.mark.asyncio
@pytest.mark.parametrize("key", [QUEUE_KEY, "limit:psp"])
async def test_many_claims_side_by_side_take_a_limit_exactly(
    storage: PostgresStorage, postgres_url: str, schema: str, key: str
) -> None:
    """Sixteen stores claim ten at a time until nothing is left to take: side by side while
    the room lasts, one at a time near the limit; together exactly the limit, never more."""
    limit = STRIPES * SPAN + 150
    await _fill(storage, "q", limit + 300, key)
    await storage.put_control(Control(queue="q", key=key, concurrency=limit), expected_version=0)
    stores = [PostgresStorage.from_url(postgres_url, schema=schema) for _ in range(16)]

    async def claim_until_empty(store: PostgresStorage) -> int:
        return await _claim_until_empty(store, 10)

    try:
        await asyncio.gather(*(s.connect() for s in stores))
        took = await asyncio.gather(*(claim_until_empty(s) for s in stores))
    finally:
        await asyncio.gather(*(s.aclose() for s in stores))
    assert sum(took) == limit
    (control,) = [c for c in await storage.list_controls("q") if c.key == key]
    assert control.in_use == limit


async def _counts_in_claim(
    conn: asyncpg.Connection, schema: str, queue: str, n: int
) -> tuple[int, int]:
    """Claim ``n`` in a transaction of ``conn`` of its own (committed): how many tasks it took
    and how many times it counted live leases (``live_leases()``, tracked in that session;
    the backend's counts not yet reported, read before and after)."""
    await conn.execute("SET track_functions = 'pl'")
    calls = "SELECT coalesce(pg_stat_get_xact_function_calls($1::regproc), 0)"
    function = f'"{schema}".live_leases'
    async with conn.transaction():
        before: int = await conn.fetchval(calls, function)
        took = await _claim_in(conn, schema, queue, n)
        after: int = await conn.fetchval(calls, function)
    return took, after - before


@pytest.mark.asyncio
@pytest.mark.parametrize("key", [QUEUE_KEY, "limit:psp"])
async def test_a_claim_that_remembers_ample_room_counts_once_and_still_keeps_the_limit(
    storage: PostgresStorage, open_claim: asyncpg.Connection, schema: str, key: str
) -> None:
    """Schema 16: a session whose last count found room for a stripe counts once in its next
    claim (under the stripe), not twice; when others used the room up meanwhile, that claim
    takes none of the key's tasks (its count under the stripe is exact), and the next one,
    counting first, takes exactly what is left."""
    limit = 1000
    await _fill(storage, "q", limit + 200, key)
    await storage.put_control(Control(queue="q", key=key, concurrency=limit), expected_version=0)
    assert await _counts_in_claim(open_claim, schema, "q", 10) == (10, 2)  # nothing remembered
    assert await _counts_in_claim(open_claim, schema, "q", 10) == (10, 1)  # room 990 remembered
    taken = 20
    while taken < limit - 50:  # other sessions take all but 50 of the limit
        taken += len(await storage.claim_due("q", min(span(limit), limit - 50 - taken), LEASE))
    assert await _counts_in_claim(open_claim, schema, "q", 100) == (0, 1)  # stale: none taken
    assert await _counts_in_claim(open_claim, schema, "q", 100) == (50, 2)  # counted: the rest
    assert await storage.claim_due("q", 10, LEASE) == []
    (control,) = [c for c in await storage.list_controls("q") if c.key == key]
    assert control.in_use == limit


async def _claim_buffers(conn: asyncpg.Connection, schema: str, queue: str) -> tuple[int, int]:
    """The shared buffers one claim of 10 reads (EXPLAIN ANALYZE counts those read inside the
    claim function) and how many tasks it took; the claim is rolled back."""
    tr = conn.transaction()
    await tr.start()
    try:
        plan = await conn.fetchval(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
            f'SELECT * FROM "{schema}".claim_controlled($1, 10, $2, NULL)',
            queue,
            int(LEASE.total_seconds() * 1e6),
        )
    finally:
        await tr.rollback()
    node = json.loads(plan)[0]["Plan"]
    return int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"]), int(
        node["Actual Rows"]
    )


@pytest.mark.asyncio
@pytest.mark.parametrize(("fair", "aging"), [("tenant:", None), ("tenant:", 2.0), (None, 1.0)])
async def test_an_ordered_claim_reads_as_many_buffers_behind_a_backlog_ten_times_deeper(
    storage: PostgresStorage,
    open_claim: asyncpg.Connection,
    schema: str,
    fair: str | None,
    aging: float | None,
) -> None:
    """Deterministic, not a race of clocks: the buffers one fair or aged claim reads behind
    2,000 and 20,000 due tasks of one tenant (and 3 of another) are about the same (a claim
    that ranked every due task read ten times as many)."""
    work = []
    for depth in (2_000, 20_000):
        queue = f"ordered-{depth}"
        await storage.put_control(
            Control(queue=queue, key=QUEUE_KEY, fair=fair, aging=aging), expected_version=0
        )
        for start in range(0, depth + 3, 1000):
            await storage.enqueue_batch(
                [
                    Envelope(
                        id=f"{queue}-{n:06d}",
                        queue=queue,
                        handler_ref="h",
                        keys=["tenant:big" if n < depth else "tenant:small"],
                    )
                    for n in range(start, min(depth + 3, start + 1000))
                ]
            )
        await open_claim.execute(f'ANALYZE "{schema}".task')
        buffers, took = await _claim_buffers(open_claim, schema, queue)
        assert took == 10
        work.append(buffers)
    assert work[1] <= work[0] * 1.5 + 50, work


@pytest.mark.asyncio
@pytest.mark.parametrize("key", [QUEUE_KEY, "limit:psp"])
async def test_claims_a_gate_cannot_run_out_within_take_from_it_exactly(
    storage: PostgresStorage, key: str
) -> None:
    """Claims of 10 under a gate of 45 are read by one statement while the gate has 10 or
    more left (schema 15), and row by row after: each takes what it took from the gate, so
    together exactly 45, and the tasks without the key are not held back."""
    await _fill(storage, "q", 100, key)
    free = [Envelope(id=f"free-{n}", queue="q", handler_ref="h") for n in range(20)]
    await storage.enqueue_batch(free)
    await storage.put_control(Control(queue="q", key=key, gate=45), expected_version=0)
    took = []
    while claimed := await storage.claim_due("q", 10, LEASE):
        took += [c.task.id for c in claimed]
    if key == QUEUE_KEY:  # the queue's gate counts every task
        assert len(took) == 45
    else:
        assert len([t for t in took if not t.startswith("free-")]) == 45
        assert {f.id for f in free} <= set(took)
    (control,) = [c for c in await storage.list_controls("q") if c.key == key]
    assert control.gate == 0
