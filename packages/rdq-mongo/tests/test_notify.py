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


def _task(task_id: str, queue: str = "q") -> Envelope:
    return Envelope(id=task_id, queue=queue, handler_ref="app:handler")


@pytest.mark.asyncio
async def test_wait_due_wakes_on_a_reschedule_into_the_past(store: MongoStorage) -> None:
    if not store._connection().change_streams:
        pytest.skip("the test server has no change streams")
    await store.enqueue(_task("w1"))
    [claim] = await store.claim_due("q", 1, timedelta(minutes=10))
    waiter = asyncio.create_task(store.wait_due("q", 60))
    await asyncio.sleep(0.3)
    assert not waiter.done()
    assert claim.task.lease_expires_at is not None
    past = claim.task.lease_expires_at - timedelta(hours=1)
    await store.reschedule("w1", claim.token, Attempt(number=1, outcome=Outcome.FAILED), past)
    assert await asyncio.wait_for(waiter, 30) is True


@pytest.mark.asyncio
async def test_rdq_notify_off_polls_and_still_wakes_when_a_task_falls_due(
    database_url: str,
) -> None:
    sep = "&" if "?" in database_url else "?"
    async with open_storage(database_url + sep + "rdq_notify=off") as storage:
        assert storage.capabilities().notify is False
        await storage.enqueue(_task("n1"), delay=timedelta(seconds=0.5))
        assert await storage.wait_due("q", 30) is True
        assert await storage.claim_due("q", 1, timedelta(minutes=1))
        assert await storage.wait_due("q", 0.2) is False
        assert isinstance(storage, MongoStorage)
        await storage._connection().client.drop_database(storage.config.database)


@pytest.mark.skipif(importlib.util.find_spec("secantus") is None, reason="needs SecantusDB")
@pytest.mark.asyncio
async def test_a_standalone_server_has_no_change_streams_and_wait_due_polls(
    tmp_path: Path,
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
            assert loop.time() - started >= 0.3
            waiter = asyncio.create_task(storage.wait_due("q", 60))
            await storage.enqueue(_task("s1"))
            # Polled every POLL_SECONDS: seen within a poll or two, far before the timeout.
            assert await asyncio.wait_for(waiter, 30) is True
            assert await storage.claim_due("q", 1, timedelta(minutes=1))
    finally:
        server.stop()
