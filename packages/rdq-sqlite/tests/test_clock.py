"""The store's clock: the host clock read in the transaction, microsecond precise, shared by
every store on the file through the database, and never running backwards."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from rdq.spi import Envelope
from rdq_sqlite import SqliteStorage, _clock

T0 = datetime(2030, 5, 17, 12, 0, 0, 123457, tzinfo=UTC)


class HostClock:
    """The host clock as the store reads it, set by the test."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> int:
        return (self.at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> HostClock:
    clock = HostClock(T0)
    monkeypatch.setattr(_clock, "host_now", clock)
    return clock


def task(task_id: str) -> Envelope:
    return Envelope(id=task_id, queue="q", handler_ref="m:f")


@pytest.mark.asyncio
async def test_store_times_are_the_host_clock_to_the_microsecond(
    store: SqliteStorage, host: HostClock
) -> None:
    await store.enqueue(task("a"))
    created = (await store.get("a")).created_at
    assert created == T0
    assert created is not None and created.microsecond == 123457
    assert await store.now() == T0


@pytest.mark.asyncio
async def test_when_the_host_clock_steps_back_the_store_time_stands_still(
    store: SqliteStorage, host: HostClock
) -> None:
    await store.enqueue(task("a"))
    host.at = T0 - timedelta(seconds=5)
    await store.enqueue(task("b"))
    assert (await store.get("b")).created_at == T0
    assert await store.now() == T0
    host.at = T0 + timedelta(seconds=1)
    await store.enqueue(task("c"))
    assert (await store.get("c")).created_at == T0 + timedelta(seconds=1)


@pytest.mark.asyncio
async def test_a_lease_never_ends_early_when_the_host_clock_steps_back(
    store: SqliteStorage, host: HostClock
) -> None:
    await store.enqueue(task("a"))
    (claim,) = await store.claim_due("q", 1, timedelta(seconds=10))
    assert claim.task.lease_expires_at == T0 + timedelta(seconds=10)
    host.at = T0 - timedelta(seconds=30)
    assert await store.claim_due("q", 1, timedelta(seconds=10)) == []
    host.at = T0 + timedelta(seconds=9, microseconds=999_999)
    assert await store.claim_due("q", 1, timedelta(seconds=10)) == []
    host.at = T0 + timedelta(seconds=10)
    (reclaim,) = await store.claim_due("q", 1, timedelta(seconds=10))
    assert reclaim.task.attempts[-1].outcome == "LEASE_EXPIRED"


@pytest.mark.asyncio
async def test_the_latest_time_handed_out_is_kept_in_the_database(
    url: str, host: HostClock
) -> None:
    async with SqliteStorage.from_url(url) as first:
        await first.enqueue(task("a"))
    host.at = T0 - timedelta(minutes=2)
    async with SqliteStorage.from_url(url) as second:  # as another process would
        assert await second.now() == T0
        await second.enqueue(task("b"))
        assert (await second.get("b")).created_at == T0


@pytest.mark.asyncio
async def test_a_step_back_beyond_the_hold_is_taken_as_a_reset_and_logged(
    store: SqliteStorage, host: HostClock, caplog: pytest.LogCaptureFixture
) -> None:
    await store.enqueue(task("a"))
    host.at = T0 - timedelta(microseconds=_clock.MAX_HOLD + 1)
    with caplog.at_level(logging.WARNING, logger="rdq_sqlite"):
        await store.enqueue(task("b"))
    assert (await store.get("b")).created_at == host.at
    assert "clock reset" in caplog.text
