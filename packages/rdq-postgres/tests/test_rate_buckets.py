"""A rate limit's bucket in a sequence of its own (schema version 18): claims move the bucket
without writing the control's row, so a transaction elsewhere that holds the xmin horizon
leaves no versions of that row for every claim to walk; a write of the control keeps the
bucket, refills it when the rate changes and drops it with the rate; an upgraded schema
carries each bucket over from its row.

The kit checks through the SPI that a rate limit lets through what its bucket holds; these
tests check where the bucket is kept."""

from __future__ import annotations

import secrets
from datetime import timedelta

import asyncpg
import pytest

from rdq.spi import QUEUE_KEY, Control, Envelope
from rdq_postgres import PostgresStorage

from .test_migrate import _schema_at

LEASE = timedelta(minutes=5)
PER_HOUR = 3600.0


async def _fill(storage: PostgresStorage, queue: str, tasks: int) -> None:
    await storage.enqueue_batch(
        [Envelope(id=f"{queue}-{n}", queue=queue, handler_ref="h") for n in range(tasks)]
    )


async def _claimed(storage: PostgresStorage, queue: str) -> int:
    return len(await storage.claim_due(queue, 100, LEASE))


async def _bucket(conn: asyncpg.Connection, schema: str, queue: str, key: str) -> str | None:
    name: str | None = await conn.fetchval(
        f'SELECT to_regclass("{schema}".bucket_name($1, $2))::text', queue, key
    )
    return name


@pytest.mark.asyncio
async def test_claims_under_a_rate_move_its_bucket_and_leave_the_control_row_as_it_was(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    await _fill(storage, "q", 50)
    await storage.put_control(
        Control(queue="q", key=QUEUE_KEY, rate=1_000_000, burst=1_000_000), expected_version=0
    )
    conn = await asyncpg.connect(postgres_url)
    try:
        row = f"SELECT xmin::text, ctid::text FROM \"{schema}\".control WHERE queue = 'q'"
        before = tuple(await conn.fetchrow(row))
        assert sum([len(await storage.claim_due("q", 5, LEASE)) for _ in range(10)]) == 50
        assert tuple(await conn.fetchrow(row)) == before, "a claim wrote the control's row"
        bucket = await _bucket(conn, schema, "q", QUEUE_KEY)
        assert bucket is not None
        arrival = await conn.fetchval("SELECT pg_sequence_last_value($1::regclass)", bucket)
        assert arrival is not None, "the claims moved the bucket's arrival time"
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_a_write_of_the_control_keeps_the_bucket_unless_the_rate_changes(
    storage: PostgresStorage,
) -> None:
    await _fill(storage, "q", 20)
    control = await storage.put_control(
        Control(queue="q", key=QUEUE_KEY, rate=2, per=PER_HOUR, burst=2), expected_version=0
    )
    assert await _claimed(storage, "q") == 2
    assert await _claimed(storage, "q") == 0, "the bucket is empty"
    paused = await storage.put_control(
        Control(queue="q", key=QUEUE_KEY, rate=2, per=PER_HOUR, burst=2, paused=True),
        expected_version=control.version,
    )
    control = await storage.put_control(
        Control(queue="q", key=QUEUE_KEY, rate=2, per=PER_HOUR, burst=2),
        expected_version=paused.version,
    )
    assert await _claimed(storage, "q") == 0, "a pause and its end refill nothing"
    control = await storage.put_control(
        Control(queue="q", key=QUEUE_KEY, rate=3, per=PER_HOUR, burst=3),
        expected_version=control.version,
    )
    assert await _claimed(storage, "q") == 3, "a new rate starts full"
    control = await storage.put_control(
        Control(queue="q", key=QUEUE_KEY), expected_version=control.version
    )
    assert await _claimed(storage, "q") == 15, "no rate: no bucket"


@pytest.mark.asyncio
async def test_a_control_deleted_or_written_without_a_rate_takes_its_bucket_with_it(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    conn = await asyncpg.connect(postgres_url)
    try:
        rated = await storage.put_control(Control(queue="q", key="api", rate=5), expected_version=0)
        assert await _bucket(conn, schema, "q", "api") is not None
        await storage.put_control(Control(queue="q", key="api"), expected_version=rated.version)
        assert await _bucket(conn, schema, "q", "api") is None
        rated = await storage.put_control(Control(queue="q", key="db", rate=5), expected_version=0)
        assert await storage.delete_control("q", "db", expected_version=rated.version)
        assert await _bucket(conn, schema, "q", "db") is None
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_an_upgrade_carries_each_bucket_over_from_its_row(postgres_url: str) -> None:
    """A schema at version 17 whose rate control's row holds an empty bucket: after the
    upgrade the bucket is still empty, and a rate control whose row holds none starts full."""
    schema = f"b_{secrets.token_hex(5)}"
    conn = await asyncpg.connect(postgres_url)
    store = PostgresStorage.from_url(postgres_url, schema=schema)
    try:
        await _schema_at(conn, schema, 17)
        await conn.execute(
            f'INSERT INTO "{schema}".control (queue, key, rate, per, burst, bucket_tokens,'
            " bucket_at, version, updated_at) VALUES"
            " ('spent', '*', 2, 3600, 2, 0.5, now(), 1, now()),"
            " ('full', '*', 2, 3600, 2, NULL, NULL, 1, now())"
        )
        async with store:
            assert "0018_rate_buckets" in await store.migrate()
            await _fill(store, "spent", 3)
            await _fill(store, "full", 3)
            assert await _claimed(store, "spent") == 0, "half a token: nothing to claim"
            assert await _claimed(store, "full") == 2
    finally:
        await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await conn.close()
