"""Leases and delays are elapsed time, whatever the session's time zone.

PostgreSQL adds the day part of an ``interval`` as a calendar day of the session's
``TimeZone``: across a daylight-saving change ``now() + interval '1 day'`` is 23 or 25 hours
away. The store binds durations as whole microseconds, so a 24-hour lease is 24 hours."""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import quote

import asyncpg
import pytest

from rdq.spi import Envelope
from rdq_postgres import PostgresStorage


def zone_changing_within_the_hour(now: datetime) -> str:
    """A POSIX time zone, UTC until the next full hour after ``now`` and an hour ahead from
    then on (for half a year)."""
    change = now + timedelta(hours=1)
    day = change.timetuple().tm_yday - 1  # zero-based, counting 29 February
    return f"XST0XDT,{day}/{change.hour},{(day + 180) % 365}/0"


@pytest.mark.asyncio
async def test_a_day_long_lease_and_delay_are_24_hours_across_a_daylight_saving_change(
    postgres_url: str, schema: str
) -> None:
    probe = await asyncpg.connect(postgres_url)
    try:
        zone = zone_changing_within_the_hour(await probe.fetchval("SELECT now()"))
        await probe.execute(f"SET TimeZone = '{zone}'")
        calendar_day = await probe.fetchval("SELECT now() + interval '1 day' - now()")
    finally:
        await probe.close()
    assert calendar_day == timedelta(hours=23), "the session's zone springs forward in the hour"

    store = PostgresStorage.from_url(f"{postgres_url}?schema={schema}&TimeZone={quote(zone)}")
    async with store:
        await store.migrate()
        day = timedelta(hours=24)
        await store.enqueue(Envelope(id="delayed", queue="q", handler_ref="h"), delay=2 * day)
        delayed = await store.get("delayed")
        assert delayed.next_attempt_at is not None and delayed.created_at is not None
        assert delayed.next_attempt_at - delayed.created_at == 2 * day
        batch = [Envelope(id=f"batch-{i}", queue="q", handler_ref="h") for i in range(2)]
        await store.enqueue_batch(batch, delay=day)
        for task in batch:
            stored = await store.get(task.id)
            assert stored.next_attempt_at is not None and stored.created_at is not None
            assert stored.next_attempt_at - stored.created_at == day

        await store.enqueue(Envelope(id="leased", queue="q", handler_ref="h"))
        (claimed,) = await store.claim_due("q", 1, day)
        assert claimed.task.lease_expires_at is not None and claimed.task.claimed_at is not None
        assert claimed.task.lease_expires_at - claimed.task.claimed_at == day
        before = await store.now()
        expires = await store.extend_lease("leased", claimed.token, day)
        after = await store.now()
        assert before + day <= expires <= after + day
