"""Faults: an unreachable server, refused credentials, a restart while workers run."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo.errors import NetworkTimeout

from rdq import open_storage
from rdq.errors import StaleClaim, StorageUnavailable
from rdq.spi import Attempt, Envelope, Outcome, Page, Status, TaskFilter
from rdq_compliance.servers.mongo import SecantusProcess, free_port
from rdq_mongo import MongoStorage

needs_secantus = pytest.mark.skipif(
    importlib.util.find_spec("secantus") is None,
    reason="restart and auth faults need a SecantusDB server this test can stop and start",
)


def _task(task_id: str, queue: str = "q") -> Envelope:
    return Envelope(id=task_id, queue=queue, handler_ref="app:handler", payload={"id": task_id})


@pytest.fixture
def secantus(tmp_path: Path) -> Iterator[SecantusProcess]:
    """A SecantusDB server of this test's own, which the test may restart."""
    server = SecantusProcess(tmp_path / "data")
    server.data_dir.mkdir()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.asyncio
async def test_unreachable_server_is_one_clear_storage_unavailable() -> None:
    port = free_port()
    storage = open_storage(f"mongodb://127.0.0.1:{port}/db?serverSelectionTimeoutMS=300")
    with pytest.raises(StorageUnavailable) as caught:
        await storage.connect()
    message = str(caught.value)
    assert f"127.0.0.1:{port}" in message
    assert "unreachable" in message
    assert "\n" not in message


@needs_secantus
@pytest.mark.parametrize("login", ["nobody:wrong@", ""], ids=["wrong-password", "no-login"])
@pytest.mark.asyncio
async def test_refused_credentials_are_one_clear_storage_unavailable(
    tmp_path: Path, login: str
) -> None:
    server = SecantusProcess(tmp_path / "data", auth=True)
    server.data_dir.mkdir()
    server.start()
    try:
        storage = open_storage(
            f"mongodb://{login}127.0.0.1:{server.port}/db"
            "?directConnection=true&serverSelectionTimeoutMS=3000"
        )
        with pytest.raises(StorageUnavailable) as caught:
            await storage.connect()
    finally:
        server.stop()
    message = str(caught.value)
    assert f"127.0.0.1:{server.port}" in message
    assert "credentials" in message
    assert "wrong" not in message  # the password is never echoed


@needs_secantus
@pytest.mark.slow
@pytest.mark.asyncio
async def test_server_restart_gives_retryable_errors_then_recovery_and_loses_nothing(
    secantus: SecantusProcess,
) -> None:
    url = secantus.url.replace("/?", "/restart?") + "&serverSelectionTimeoutMS=2000&timeout=2"
    lease = timedelta(seconds=2)
    acknowledged: set[str] = set()
    completed: set[str] = set()
    outages: list[StorageUnavailable] = []
    stop = asyncio.Event()

    async with open_storage(url) as storage:
        await storage.migrate()
        first = [_task(f"r{n:03d}") for n in range(60)]
        await storage.enqueue_batch(first)
        acknowledged.update(t.id for t in first)

    async def worker() -> None:
        async with open_storage(url) as store:
            while not stop.is_set():
                try:
                    claimed = await store.claim_due("q", 3, lease)
                    for claim in claimed:
                        await asyncio.sleep(0.02)
                        attempt = Attempt(number=1, outcome=Outcome.SUCCEEDED)
                        try:
                            await store.complete(claim.task.id, claim.token, attempt)
                        except StaleClaim:
                            continue
                        completed.add(claim.task.id)
                    if not claimed:
                        await asyncio.sleep(0.05)
                except StorageUnavailable as exc:
                    outages.append(exc)
                    await asyncio.sleep(0.2)

    async def producer() -> None:
        async with open_storage(url) as store:
            for n in range(40):
                task = _task(f"p{n:03d}")
                while not stop.is_set():
                    try:
                        await store.enqueue(task)
                    except StorageUnavailable as exc:
                        outages.append(exc)
                        await asyncio.sleep(0.2)
                        continue
                    acknowledged.add(task.id)
                    break
                await asyncio.sleep(0.05)

    workers = [asyncio.create_task(worker()) for _ in range(3)]
    producing = asyncio.create_task(producer())
    try:
        await _until(lambda: len(completed) >= 10, "workers to complete some tasks")
        # Down until a caller has seen StorageUnavailable (PyMongo retries by itself within the
        # 2 s operation timeout, so that takes a while): then it comes back, and callers must
        # recover.
        await asyncio.to_thread(secantus.stop)
        await _until(lambda: bool(outages), "a caller to see the outage")
        await asyncio.to_thread(secantus.start)
        await producing
        # The store is the judge, not the workers' tally: a completion that landed just as the
        # server went down loses its reply, so its worker never learns that it succeeded.
        await _until_succeeded(url, acknowledged)
    finally:
        stop.set()
        ended = await asyncio.gather(*workers, producing, return_exceptions=True)
    # A worker or the producer that died of anything but StorageUnavailable fails the test.
    assert [e for e in ended if isinstance(e, BaseException)] == []

    assert outages, "the restart produced no retryable error: the test proved nothing"
    async with open_storage(url) as storage:
        for task_id in sorted(acknowledged):
            assert (await storage.get(task_id)).status == Status.SUCCEEDED, task_id
        stats = await storage.stats("q")
        assert stats.succeeded == len(acknowledged) == 100


async def _until_succeeded(url: str, task_ids: set[str], timeout: float = 180.0) -> None:
    """Wait until the store holds every one of ``task_ids`` as SUCCEEDED."""
    deadline = time.monotonic() + timeout
    async with open_storage(url) as storage:
        while True:
            try:
                pending = [i for i in task_ids if (await storage.get(i)).status != Status.SUCCEEDED]
            except StorageUnavailable:
                pending = sorted(task_ids)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {sorted(pending)} to succeed")
            await asyncio.sleep(0.2)


async def _until(condition: object, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


@pytest.mark.asyncio
async def test_a_claim_batch_cut_short_hands_over_what_it_claimed(
    store: MongoStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is claimed one task at a time: when the server fails part-way (the operation
    timeout running out on a busy server), the tasks already leased are returned, not
    stranded IN_FLIGHT until their leases lapse and each loses an attempt."""
    for n in range(5):
        await store.enqueue(_task(f"t{n}"))
    tasks = store._connection().tasks
    claim_one = tasks.find_one_and_update
    calls = 0

    async def failing_third(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise NetworkTimeout("timed out")
        return await claim_one(*args, **kwargs)

    monkeypatch.setattr(tasks, "find_one_and_update", failing_third)
    claimed = await store.claim_due("q", 5, timedelta(minutes=10), worker_id="w")
    monkeypatch.undo()
    held = {c.task.id for c in claimed}
    assert len(held) == 2
    running, _ = await store.list_tasks("q", TaskFilter(status=Status.IN_FLIGHT), Page(limit=10))
    leased = {t.id for t in running}
    assert leased == held, "every leased task was handed to the claimant"
    calls = 2  # the next call fails first: with nothing claimed, the failure is reported
    monkeypatch.setattr(tasks, "find_one_and_update", failing_third)
    with pytest.raises(StorageUnavailable):
        await store.claim_due("q", 5, timedelta(minutes=10))


@pytest.mark.asyncio
async def test_a_lease_that_lapses_during_its_batch_is_not_claimed_again_by_it(
    store: MongoStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow server, or a lease shorter than one round trip: the batch's first claim has
    lapsed by its next findAndModify. The batch must not reclaim it (one task, two tokens,
    the first already stale)."""
    await store.enqueue(_task("only"))
    tasks = store._connection().tasks
    claim_one = tasks.find_one_and_update

    async def slow(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.1)  # longer than the lease below
        return await claim_one(*args, **kwargs)

    monkeypatch.setattr(tasks, "find_one_and_update", slow)
    claimed = await store.claim_due("q", 3, timedelta(milliseconds=20))
    monkeypatch.undo()
    assert [c.task.id for c in claimed] == ["only"]
    assert (await store.get("only")).attempt_count == 0, "no lapsed reclaim was recorded"
