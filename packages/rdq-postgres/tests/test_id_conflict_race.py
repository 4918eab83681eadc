"""IDConflict under concurrency: an id that another transaction commits in another queue while
a batch admission waits on it is reported as IDConflict — never as "already in this queue" —
and nothing of the batch is stored.

The other producer holds the id in an open transaction (``enqueue_in``); the batch's INSERT
waits on that row lock, and the holder commits only once the batch is seen waiting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import asyncpg
import pytest
import pytest_asyncio

from rdq.errors import IDConflict, NotFound
from rdq.spi import Envelope, Status
from rdq_postgres import PostgresStorage

Admit = Callable[[PostgresStorage, list[Envelope]], Awaitable[list[bool]]]


def _imported(task: Envelope) -> Envelope:
    now = datetime.now(UTC)
    task.status, task.created_at, task.next_attempt_at = Status.PENDING, now, now
    return task


async def _batch(storage: PostgresStorage, tasks: list[Envelope]) -> list[bool]:
    return await storage.enqueue_batch(tasks)


async def _batch_with_history(storage: PostgresStorage, tasks: list[Envelope]) -> list[bool]:
    # a redrive count makes the batch take enqueue_batch.sql, not the lighter fresh form
    for task in tasks:
        task.redrive_count = 1
    return await storage.enqueue_batch(tasks)


async def _import(storage: PostgresStorage, tasks: list[Envelope]) -> list[bool]:
    return await storage.import_tasks([_imported(task) for task in tasks])


async def _enqueue_in(storage: PostgresStorage, tasks: list[Envelope]) -> list[bool]:
    conn = await asyncpg.connect(storage.config.dsn)
    try:
        async with conn.transaction():
            return await storage.enqueue_in(conn, tasks)
    finally:
        await conn.close()


ADMISSIONS: dict[str, Admit] = {
    "enqueue_batch": _batch,
    "enqueue_batch-with-history": _batch_with_history,
    "import_tasks": _import,
    "enqueue_in": _enqueue_in,
}


@pytest_asyncio.fixture
async def holder(storage: PostgresStorage) -> AsyncIterator[asyncpg.Connection]:
    """The other producer's connection."""
    conn = await asyncpg.connect(storage.config.dsn)
    try:
        yield conn
    finally:
        await conn.close()


_BLOCKED = """
    SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))
    FROM pg_sleep(0.01)
"""


async def _until_blocked_by(watcher: asyncpg.Connection, holder_pid: int) -> None:
    """Return once some backend waits on a lock ``holder_pid`` holds (asked every 10 ms)."""
    while not await watcher.fetchval(_BLOCKED, holder_pid):
        pass


@pytest.mark.asyncio
@pytest.mark.parametrize("admission", sorted(ADMISSIONS))
async def test_an_id_committed_in_another_queue_while_the_batch_waits_is_an_id_conflict(
    storage: PostgresStorage, holder: asyncpg.Connection, admission: str
) -> None:
    other = Envelope(id="contested", queue="A", handler_ref="m:f")
    ours = [
        Envelope(id="contested", queue="B", handler_ref="m:f"),
        Envelope(id="innocent", queue="B", handler_ref="m:f"),
    ]
    transaction = holder.transaction()
    await transaction.start()
    await storage.enqueue_in(holder, [other])
    admitting = asyncio.create_task(ADMISSIONS[admission](storage, ours))
    watcher = await asyncpg.connect(storage.config.dsn)
    try:
        await asyncio.wait_for(_until_blocked_by(watcher, holder.get_server_pid()), 30)
    finally:
        await watcher.close()
    assert not admitting.done()
    await transaction.commit()
    with pytest.raises(IDConflict) as caught:
        await admitting
    assert (caught.value.task_id, caught.value.existing_queue) == ("contested", "A")
    assert (await storage.get("contested")).queue == "A"
    with pytest.raises(NotFound):
        await storage.get("innocent")


@pytest.mark.asyncio
@pytest.mark.parametrize("admission", sorted(ADMISSIONS))
async def test_an_id_committed_in_the_same_queue_while_the_batch_waits_is_present(
    storage: PostgresStorage, holder: asyncpg.Connection, admission: str
) -> None:
    ours = [
        Envelope(id="shared", queue="A", handler_ref="m:f"),
        Envelope(id="fresh", queue="A", handler_ref="m:f"),
    ]
    transaction = holder.transaction()
    await transaction.start()
    await storage.enqueue_in(holder, [Envelope(id="shared", queue="A", handler_ref="m:f")])
    admitting = asyncio.create_task(ADMISSIONS[admission](storage, ours))
    watcher = await asyncpg.connect(storage.config.dsn)
    try:
        await asyncio.wait_for(_until_blocked_by(watcher, holder.get_server_pid()), 30)
    finally:
        await watcher.close()
    await transaction.commit()
    assert await admitting == [False, True]
    assert (await storage.get("fresh")).queue == "A"
