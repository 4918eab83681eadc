"""``enqueue_batch`` racing another producer on the same ids, with and without transactions.

The interleaving is forced: the batch's first write is wrapped so that the other producer
acts right before it (putting one of the batch's ids into another queue) and right after it
(enqueueing another of the batch's ids into the same queue, the way a retried submit does).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from rdq import open_storage
from rdq.errors import IDConflict, NotFound
from rdq.spi import Envelope, Status
from rdq_compliance.servers.mongo import SecantusProcess
from rdq_mongo import MongoStorage


def _task(task_id: str, queue: str = "q") -> Envelope:
    return Envelope(id=task_id, queue=queue, handler_ref="app:handler", payload={"id": task_id})


@pytest_asyncio.fixture(params=["transactions", "standalone"])
async def server_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A replica set (transactions) from the session's server, or a standalone SecantusDB
    of this test's own (no transactions)."""
    if request.param == "transactions":
        yield request.getfixturevalue("database_url")
        return
    if importlib.util.find_spec("secantus") is None:
        pytest.skip("the standalone case needs SecantusDB")
    server = SecantusProcess(tmp_path / "data", standalone=True)
    server.data_dir.mkdir()
    server.start()
    try:
        yield server.url.replace("/?", "/race?")
    finally:
        server.stop()


def _around_first_bulk_write(
    storage: MongoStorage,
    before: Callable[[], Awaitable[object]],
    after: Callable[[], Awaitable[object]],
) -> None:
    """Run ``before`` right before the first bulk write of ``storage``'s tasks collection and
    ``after`` right after it returns."""
    tasks = storage._connection().tasks
    real = tasks.bulk_write
    calls = 0

    async def bulk_write(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls > 1:
            return await real(*args, **kwargs)
        await before()
        result = await real(*args, **kwargs)
        await after()
        return result

    tasks.bulk_write = bulk_write  # type: ignore[method-assign]


@pytest.mark.asyncio
async def test_a_batch_undone_by_a_race_never_removes_another_producers_task(
    server_url: str,
) -> None:
    async with open_storage(server_url) as a, open_storage(server_url) as b:
        assert isinstance(a, MongoStorage)
        await a.migrate()
        told: dict[str, bool] = {}

        async def b_takes_c_in_another_queue() -> None:
            assert await b.enqueue(_task("c", queue="other"))

        async def b_enqueues_x_too() -> None:
            told["x"] = await asyncio.wait_for(b.enqueue(_task("x")), 30)

        _around_first_bulk_write(a, b_takes_c_in_another_queue, b_enqueues_x_too)
        with pytest.raises(IDConflict) as caught:
            await a.enqueue_batch([_task("x"), _task("y"), _task("c")])
        assert (caught.value.task_id, caught.value.existing_queue) == ("c", "other")

        if "x" not in told:  # the batch wrote nothing B could see: B's enqueue comes after
            await b_enqueues_x_too()
        # B was told x is stored (True: B stored it; False: it was there already): it must be.
        x = await b.get("x")
        assert (x.queue, x.status) == ("q", Status.PENDING)
        # y was the batch's alone: the batch raised, so y is not stored.
        with pytest.raises(NotFound):
            await b.get("y")
        assert (await b.get("c")).queue == "other"
        await a._connection().client.drop_database(a.config.database)


@pytest.mark.asyncio
async def test_a_batch_that_wins_the_race_reports_each_id_once(server_url: str) -> None:
    async with open_storage(server_url) as a, open_storage(server_url) as b:
        assert isinstance(a, MongoStorage)
        await a.migrate()
        stored_by_b: list[bool] = []

        async def b_stores_one_of_the_ids() -> None:
            stored_by_b.append(await b.enqueue(_task("m2")))

        async def nothing() -> None:
            return None

        _around_first_bulk_write(a, b_stores_one_of_the_ids, nothing)
        stored = await a.enqueue_batch([_task(f"m{n}") for n in range(4)])
        assert stored_by_b == [True]
        assert stored == [True, True, False, True]
        assert (await a.stats("q")).pending == 4
        await a._connection().client.drop_database(a.config.database)


@pytest.mark.asyncio
async def test_two_producers_batching_the_same_ids_store_each_once_and_one_says_so(
    server_url: str,
) -> None:
    async with open_storage(server_url) as a, open_storage(server_url) as b:
        assert isinstance(a, MongoStorage)
        await a.migrate()
        ids = [f"s{n:02d}" for n in range(30)]
        # Overlapping batches, in opposite orders, several rounds at once.
        results = await asyncio.gather(
            *(
                producer.enqueue_batch([_task(i) for i in chunk])
                for producer, chunk in (
                    (a, ids[:20]),
                    (b, list(reversed(ids[10:]))),
                    (a, ids[5:25]),
                    (b, ids),
                )
            )
        )
        chunks = (ids[:20], list(reversed(ids[10:])), ids[5:25], ids)
        said_stored: dict[str, int] = dict.fromkeys(ids, 0)
        for chunk, flags in zip(chunks, results, strict=True):
            for task_id, stored in zip(chunk, flags, strict=True):
                said_stored[task_id] += stored
        assert said_stored == dict.fromkeys(ids, 1), "exactly one producer stored each id"
        assert (await a.stats("q")).pending == len(ids)
        await a._connection().client.drop_database(a.config.database)
