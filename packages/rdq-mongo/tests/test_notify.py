"""``wait_due``: change streams where the server has them, a clean fallback where not."""

from __future__ import annotations

import asyncio
import importlib.util
from datetime import timedelta
from pathlib import Path

import pytest

from rdq import open_storage
from rdq.spi import Attempt, Envelope, Outcome
from rdq_compliance.servers.mongo import SecantusProcess
from rdq_mongo import MongoStorage

from .conftest import DueLooks

PATIENCE = 60.0
"""How long a waiter may take to wake before the test fails (only a lost wake-up takes it)."""


def _task(task_id: str, queue: str = "q") -> Envelope:
    return Envelope(id=task_id, queue=queue, handler_ref="app:handler")


@pytest.mark.asyncio
async def test_wait_due_wakes_on_a_reschedule_into_the_past(
    store: MongoStorage, due_looks: DueLooks
) -> None:
    if not store._connection().change_streams:
        pytest.skip("the test server has no change streams")
    await store.enqueue(_task("w1"))
    [claim] = await store.claim_due("q", 1, timedelta(minutes=10))
    waiter = asyncio.create_task(store.wait_due("q", 3600))
    # Its stream is open and it saw the lease run for minutes: only the stream can wake it.
    until_due = await due_looks.nth(0)
    assert until_due is not None and until_due > 60
    assert not waiter.done()
    assert claim.task.lease_expires_at is not None
    past = claim.task.lease_expires_at - timedelta(hours=1)
    await store.reschedule("w1", claim.token, Attempt(number=1, outcome=Outcome.FAILED), past)
    assert await asyncio.wait_for(waiter, PATIENCE) is True
    assert store._connection().change_streams, "it fell back to polling: not what this tests"


@pytest.mark.asyncio
async def test_rdq_notify_off_polls_and_still_wakes_when_a_task_falls_due(
    database_url: str, due_looks: DueLooks
) -> None:
    sep = "&" if "?" in database_url else "?"
    async with open_storage(database_url + sep + "rdq_notify=off") as storage:
        assert storage.capabilities().notify is False
        # The waiter must look while the task is not yet due (else it returns at once and
        # this proves nothing): if this machine was slower than the delay, try a longer one.
        for delay in (0.5, 2.0, 8.0, 30.0):
            queue = f"q-{delay:g}"
            await storage.enqueue(_task(f"n-{delay:g}", queue), delay=timedelta(seconds=delay))
            first_look = len(due_looks.seen)
            woke = await asyncio.wait_for(storage.wait_due(queue, 3600), delay + PATIENCE)
            assert woke is True
            assert await storage.claim_due(queue, 1, timedelta(minutes=1))  # due when it woke
            until_due = due_looks.seen[first_look]
            if until_due is not None and until_due > 0:
                break  # it looked before the task was due, then woke when it fell due
        else:
            pytest.fail("wait_due never looked before the task was due, even with a 30 s delay")
        # Claimed, its lease a minute away: nothing is due, so the wait times out.
        assert await storage.wait_due(queue, 0.2) is False
        assert isinstance(storage, MongoStorage)
        await storage._connection().client.drop_database(storage.config.database)


@pytest.mark.skipif(importlib.util.find_spec("secantus") is None, reason="needs SecantusDB")
@pytest.mark.asyncio
async def test_a_standalone_server_has_no_change_streams_and_wait_due_polls(
    tmp_path: Path, due_looks: DueLooks
) -> None:
    server = SecantusProcess(tmp_path / "data", standalone=True)
    server.data_dir.mkdir()
    server.start()
    try:
        async with open_storage(server.url.replace("/?", "/solo?")) as storage:
            assert isinstance(storage, MongoStorage)
            assert storage.capabilities().notify is True
            assert storage._connection().change_streams is False
            await storage.migrate()
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert await storage.wait_due("q", 0.3) is False
            assert loop.time() - started >= 0.3  # never False before its timeout
            first_look = len(due_looks.seen)
            waiter = asyncio.create_task(storage.wait_due("q", 3600))
            assert await due_looks.nth(first_look) is None  # it looked at an empty queue
            await storage.enqueue(_task("s1"))
            # Seen by a later poll (every POLL_SECONDS); the bound only fails a waiter that
            # never looks again.
            assert await asyncio.wait_for(waiter, PATIENCE) is True
            assert await storage.claim_due("q", 1, timedelta(minutes=1))
    finally:
        server.stop()
