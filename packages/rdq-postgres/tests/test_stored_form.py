"""The stored form every binding writes and reads (docs/postgres-schema.md, "Rules for every
binding"): attempt times in UTC with ``Z`` at microsecond precision, any RFC 3339 time read,
a time without an offset read as corrupt, and keys a newer writer put in ``retry`` or in an
attempt record ignored by readers and left in the row."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone

import asyncpg
import pytest
import pytest_asyncio

from rdq.errors import NotFound, ValidationError
from rdq.spi import Attempt, Envelope, Outcome
from rdq_postgres import PostgresStorage

LEASE = timedelta(seconds=60)


@pytest_asyncio.fixture
async def sql(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(postgres_url)
    try:
        yield conn
    finally:
        await conn.close()


async def _stored_attempts(storage: PostgresStorage, sql: asyncpg.Connection, task_id: str) -> str:
    text: str = await sql.fetchval(
        f'SELECT attempts::text FROM "{storage.config.schema}".task WHERE id = $1', task_id
    )
    return text


@pytest.mark.asyncio
async def test_attempt_times_are_written_in_utc_with_z_to_the_microsecond(
    storage: PostgresStorage, sql: asyncpg.Connection
) -> None:
    await storage.enqueue(Envelope(id="t", queue="q", handler_ref="h"))
    (claimed,) = await storage.claim_due("q", 1, LEASE)
    plus_two = timezone(timedelta(hours=2))
    failed = Attempt(
        number=1,
        outcome=Outcome.FAILED,
        started_at=datetime(2026, 1, 2, 5, 4, 5, tzinfo=plus_two),
        finished_at=datetime(2026, 1, 2, 3, 4, 6, 120000, tzinfo=UTC),
    )
    await storage.reschedule("t", claimed.token, failed, await storage.now())
    stored = await _stored_attempts(storage, sql, "t")
    assert '"started_at":"2026-01-02T03:04:05Z"' in stored, stored
    assert '"finished_at":"2026-01-02T03:04:06.120000Z"' in stored, stored
    (read,) = (await storage.get("t")).attempts
    assert (read.started_at, read.finished_at) == (failed.started_at, failed.finished_at)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("2026-01-02T03:04:05Z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05.000000Z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05.5Z", datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)),
        ("2026-01-02T03:04:05.1234567Z", datetime(2026, 1, 2, 3, 4, 5, 123457, tzinfo=UTC)),
        ("2026-01-02t03:04:05.25z", datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=UTC)),
        ("2026-01-02 05:04:05+02:00", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T00:34:05-02:30", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ],
)
async def test_readers_take_any_rfc3339_time_to_the_nearest_microsecond(
    storage: PostgresStorage, sql: asyncpg.Connection, written: str, meant: datetime
) -> None:
    await storage.enqueue(Envelope(id="t", queue="q", handler_ref="h"))
    record = f'[{{"number":1,"outcome":"FAILED","started_at":"{written}"}}]'
    await sql.execute(
        f'UPDATE "{storage.config.schema}".task SET attempts = $1::json, attempt_count = 1',
        record,
    )
    task = await storage.get("t")
    assert task.corrupt is None
    assert task.attempts[0].started_at == meant


@pytest.mark.asyncio
async def test_an_attempt_time_without_an_offset_reads_as_corrupt(
    storage: PostgresStorage, sql: asyncpg.Connection
) -> None:
    await storage.enqueue(Envelope(id="t", queue="q", handler_ref="h", payload=[1]))
    record = '[{"number":1,"outcome":"FAILED","finished_at":"2026-01-02T03:04:05"}]'
    await sql.execute(
        f'UPDATE "{storage.config.schema}".task SET attempts = $1::json, attempt_count = 1',
        record,
    )
    task = await storage.get("t")
    assert task.corrupt is not None and "attempts" in task.corrupt and record in task.corrupt
    assert task.payload == [1]


@pytest.mark.asyncio
async def test_enqueue_refuses_an_attempt_time_without_an_offset(
    storage: PostgresStorage,
) -> None:
    naive = Attempt(number=1, outcome=Outcome.FAILED, started_at=datetime(2026, 1, 2))
    task = Envelope(id="t", queue="q", handler_ref="h", attempt_count=1, attempts=[naive])
    with pytest.raises(ValidationError) as refused:
        await storage.enqueue(task)
    assert refused.value.field == "attempts[0].started_at"
    with pytest.raises(ValidationError):
        await storage.enqueue_batch([Envelope(id="ok", queue="q", handler_ref="h"), task])
    for task_id in ("t", "ok"):
        with pytest.raises(NotFound):
            await storage.get(task_id)


@pytest.mark.asyncio
async def test_unknown_keys_in_retry_and_attempt_records_are_ignored_and_stay_in_the_row(
    storage: PostgresStorage, sql: asyncpg.Connection
) -> None:
    await storage.enqueue(Envelope(id="t", queue="q", handler_ref="h"))
    await sql.execute(
        f'UPDATE "{storage.config.schema}".task SET retry = $1::json, attempts = $2::json, '
        "attempt_count = 1",
        '{"max_attempts":3,"jitter":"full"}',
        '[{"number":1,"outcome":"FAILED","x-trace":{"span":7}}]',
    )
    task = await storage.get("t")
    assert task.corrupt is None
    assert task.retry is not None and task.retry.max_attempts == 3
    assert [(a.number, a.outcome) for a in task.attempts] == [(1, Outcome.FAILED)]
    (claimed,) = await storage.claim_due("q", 1, LEASE)
    await storage.complete("t", claimed.token, Attempt(number=2, outcome=Outcome.SUCCEEDED))
    row = await sql.fetchrow(
        f'SELECT retry::text AS retry, attempts::text AS attempts FROM "{storage.config.schema}"'
        ".task WHERE id = 't'"
    )
    assert row["retry"] == '{"max_attempts":3,"jitter":"full"}'
    assert row["attempts"].startswith('[{"number":1,"outcome":"FAILED","x-trace":{"span":7}},')
