"""``wait_due``: woken at once by writes of this process (whichever store made them), and by
writes of other processes within the watch interval."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

import pytest

from rdq.spi import Envelope
from rdq_sqlite import SqliteStorage

ENQUEUE_ELSEWHERE = """
import asyncio, sys
from rdq import open_storage
from rdq.spi import Envelope

async def main():
    async with open_storage(sys.argv[1]) as store:
        await store.enqueue(Envelope(id="from-afar", queue="q", handler_ref="m:f"))

asyncio.run(main())
"""


@pytest.mark.asyncio
async def test_another_store_of_this_process_wakes_a_waiter_at_once(url: str) -> None:
    # a watch interval longer than the wait: only the doorbell can wake it in time
    async with (
        SqliteStorage.from_url(url, watch_interval=600) as waiting,
        SqliteStorage.from_url(url) as writing,
    ):
        waiter = asyncio.create_task(waiting.wait_due("q", 30))
        await asyncio.sleep(0.05)  # let it look once and start waiting
        await writing.enqueue(Envelope(id="a", queue="q", handler_ref="m:f"))
        assert await asyncio.wait_for(waiter, 10) is True


@pytest.mark.asyncio
async def test_a_write_by_another_process_wakes_a_waiter(url: str) -> None:
    async with SqliteStorage.from_url(url, watch_interval=0.05) as store:
        waiter = asyncio.create_task(store.wait_due("q", 20))
        process = await asyncio.create_subprocess_exec(sys.executable, "-c", ENQUEUE_ELSEWHERE, url)
        assert await process.wait() == 0
        assert await asyncio.wait_for(waiter, 15) is True
        (claim,) = await store.claim_due("q", 1, timedelta(seconds=5))
        assert claim.task.id == "from-afar"


@pytest.mark.asyncio
async def test_a_waiter_wakes_when_a_delayed_task_comes_due(store: SqliteStorage) -> None:
    await store.enqueue(
        Envelope(id="later", queue="q", handler_ref="m:f"), delay=timedelta(milliseconds=200)
    )
    assert await store.wait_due("q", 20) is True
    assert [c.task.id for c in await store.claim_due("q", 1, timedelta(seconds=5))] == ["later"]


@pytest.mark.asyncio
async def test_notify_can_be_turned_off(url: str) -> None:
    async with SqliteStorage.from_url(url, notify=False) as store:
        assert not store.capabilities().notify
        with pytest.raises(NotImplementedError):
            await store.wait_due("q", 0.1)
