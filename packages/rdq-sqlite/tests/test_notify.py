"""``wait_due``: woken at once by writes of this process (whichever store made them), and by
writes of other processes within the watch interval."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

import pytest

from rdq.spi import Envelope
from rdq_sqlite import SqliteStorage

from .conftest import DueLooks

PATIENCE = 60.0
"""How long a waiter may take to wake before the test fails (only a lost wake-up takes it)."""

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
async def test_another_store_of_this_process_wakes_a_waiter_at_once(
    url: str, due_looks: DueLooks
) -> None:
    # It looks only every 600 s and waits an hour: only the doorbell can wake it in time.
    async with (
        SqliteStorage.from_url(url, watch_interval=600) as waiting,
        SqliteStorage.from_url(url) as writing,
    ):
        waiter = asyncio.create_task(waiting.wait_due("q", 3600))
        assert (await due_looks.nth(0))[1] is None  # it saw an empty queue and waits
        assert not waiter.done()
        await writing.enqueue(Envelope(id="a", queue="q", handler_ref="m:f"))
        assert await asyncio.wait_for(waiter, PATIENCE) is True


@pytest.mark.asyncio
async def test_a_write_by_another_process_wakes_a_waiter(url: str, due_looks: DueLooks) -> None:
    async with SqliteStorage.from_url(url, watch_interval=0.05) as store:
        waiter = asyncio.create_task(store.wait_due("q", 3600))
        assert (await due_looks.nth(0))[1] is None  # it saw an empty queue and waits
        process = await asyncio.create_subprocess_exec(sys.executable, "-c", ENQUEUE_ELSEWHERE, url)
        assert await process.wait() == 0
        assert await asyncio.wait_for(waiter, PATIENCE) is True
        (claim,) = await store.claim_due("q", 1, timedelta(seconds=5))
        assert claim.task.id == "from-afar"


@pytest.mark.asyncio
async def test_a_waiter_wakes_when_a_delayed_task_comes_due(
    store: SqliteStorage, due_looks: DueLooks
) -> None:
    # The waiter must look while the task is not yet due (else it returns at once and this
    # proves nothing): if this machine was slower than the delay, try a longer one.
    for delay in (0.2, 1.0, 5.0, 25.0):
        queue = f"q-{delay:g}"
        await store.enqueue(
            Envelope(id=f"later-{delay:g}", queue=queue, handler_ref="m:f"),
            delay=timedelta(seconds=delay),
        )
        looks = len(due_looks.seen)
        assert await asyncio.wait_for(store.wait_due(queue, 3600), delay + PATIENCE) is True
        claimed = await store.claim_due(queue, 1, timedelta(seconds=5))
        assert [c.task.id for c in claimed] == [f"later-{delay:g}"]  # due when it woke
        now, due = due_looks.seen[looks]
        if due is not None and due > now:
            return  # it looked before the task was due, then woke at the due time
    pytest.fail("wait_due never looked before the task was due, even with a 25 s delay")


@pytest.mark.asyncio
async def test_notify_can_be_turned_off(url: str) -> None:
    async with SqliteStorage.from_url(url, notify=False) as store:
        assert not store.capabilities().notify
        with pytest.raises(NotImplementedError):
            await store.wait_due("q", 0.1)
