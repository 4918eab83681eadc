"""What ``StorageBase`` gives every plugin: the lifecycle, and ``dlq_groups`` by paging."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from rdq.errors import NotConnected
from rdq.spi import DLQFilter, Envelope, Page, Status, StorageBase
from rdq_memory import MemoryStorage


class _SlowToOpen(MemoryStorage):
    """Its ``_open`` waits until the test lets it finish."""

    def __init__(self) -> None:
        super().__init__()
        self.opening = asyncio.Event()
        self.release = asyncio.Event()
        self.closes = 0

    async def _open(self) -> None:
        self.opening.set()
        await self.release.wait()
        await super()._open()

    async def _close(self) -> None:
        self.closes += 1
        await super()._close()


@pytest.mark.asyncio
async def test_aclose_during_a_connect_leaves_the_store_closed() -> None:
    store = _SlowToOpen()
    connecting = asyncio.create_task(store.connect())
    await store.opening.wait()
    closing = asyncio.create_task(store.aclose())
    await asyncio.sleep(0)  # let aclose run up to where it waits for the connect
    store.release.set()
    await connecting
    await closing
    assert not store.is_open and store.closes == 1
    with pytest.raises(NotConnected):
        await store.stats("q")
    await store.connect()  # and it opens again
    assert store.is_open
    await store.aclose()


class _ScanningStore(MemoryStorage):
    """A store without group pushdown whose DLQ holds tasks read back without their times
    (corrupt ones, as a third-party store may return them)."""

    _dlq_groups = StorageBase._dlq_groups  # the default: paging through dlq_list

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        created = datetime(2030, 1, 2, tzinfo=UTC)
        return [
            Envelope(id="a", queue=queue, handler_ref="h", status=Status.DEAD, corrupt="x"),
            Envelope(
                id="b",
                queue=queue,
                handler_ref="g",
                status=Status.DEAD,
                created_at=created,
                corrupt="x",
            ),
            Envelope(
                id="c",
                queue=queue,
                handler_ref="g",
                status=Status.DEAD,
                dead_lettered_at=datetime(2030, 1, 3, tzinfo=UTC),
            ),
        ], None


@pytest.mark.asyncio
async def test_dlq_groups_counts_dead_tasks_read_back_without_their_times() -> None:
    async with _ScanningStore() as store:
        groups = {g.handler_ref: g for g in await store.dlq_groups("q")}
        assert {h: g.count for h, g in groups.items()} == {"g": 2, "h": 1}
        assert groups["g"].first_dead_lettered_at == datetime(2030, 1, 2, tzinfo=UTC)
        assert groups["g"].last_dead_lettered_at == datetime(2030, 1, 3, tzinfo=UTC)
        undated = groups["h"]
        assert undated.first_dead_lettered_at == undated.last_dead_lettered_at
        assert undated.first_dead_lettered_at.tzinfo is not None
