"""No operation hangs: a write lock held elsewhere or a statement that runs too long ends in
``StorageUnavailable`` within the operation timeout, and the store works again afterwards."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from rdq.errors import StorageUnavailable
from rdq.spi import Envelope
from rdq_sqlite import SqliteStorage
from rdq_sqlite._connection import Mode

TIMEOUT = 0.5


@pytest.fixture
def held_write_lock(database: Path) -> Iterator[sqlite3.Connection]:
    """Another connection (as another process would) holding the write lock."""
    conn = sqlite3.connect(database, isolation_level=None)
    yield conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


@pytest.mark.asyncio
async def test_a_write_waits_for_the_lock_only_as_long_as_the_timeout(
    url: str, held_write_lock: sqlite3.Connection
) -> None:
    async with SqliteStorage.from_url(url, timeout=TIMEOUT) as store:
        await store.enqueue(Envelope(id="before", queue="q", handler_ref="m:f"))
        held_write_lock.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        with pytest.raises(StorageUnavailable, match="timeout"):
            await store.enqueue(Envelope(id="during", queue="q", handler_ref="m:f"))
        waited = time.monotonic() - started
        assert TIMEOUT * 0.8 <= waited < TIMEOUT * 10
        # reads go on beside the writer (WAL) ...
        assert (await store.get("before")).id == "before"
        # ... and once the lock is released, writes do too
        held_write_lock.execute("ROLLBACK")
        assert await store.enqueue(Envelope(id="after", queue="q", handler_ref="m:f"))
        assert [c.task.id for c in await store.claim_due("q", 5, timedelta(seconds=30))] == [
            "before",
            "after",
        ]


@pytest.mark.asyncio
async def test_a_write_that_gets_the_lock_before_the_timeout_succeeds(
    url: str, held_write_lock: sqlite3.Connection
) -> None:
    async with SqliteStorage.from_url(url, timeout=5) as store:
        held_write_lock.execute("BEGIN IMMEDIATE")
        enqueue = asyncio.create_task(
            store.enqueue(Envelope(id="waits", queue="q", handler_ref="m:f"))
        )
        await asyncio.sleep(0.2)
        assert not enqueue.done()
        held_write_lock.execute("COMMIT")
        assert await asyncio.wait_for(enqueue, 5)


@pytest.mark.asyncio
async def test_a_statement_running_past_the_timeout_is_interrupted(url: str) -> None:
    async with SqliteStorage.from_url(url, timeout=TIMEOUT) as store:
        writer = store._writer  # white-box: no contract operation can be made to run forever
        assert writer is not None
        forever = (
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
        )
        started = time.monotonic()
        with pytest.raises(StorageUnavailable, match="timeout"):
            await writer.call(lambda conn: conn.execute(forever).fetchone(), Mode.WRITE)
        assert time.monotonic() - started < TIMEOUT * 10
        # the connection was stopped, not lost: the next operation works at once
        assert await store.enqueue(Envelope(id="next", queue="q", handler_ref="m:f"))
        assert (await store.get("next")).id == "next"


@pytest.mark.asyncio
async def test_an_unopenable_file_raises_storage_unavailable(tmp_path: Path) -> None:
    store = SqliteStorage.from_url(f"sqlite:///{tmp_path}/missing-directory/rdq.db")
    with pytest.raises(StorageUnavailable, match="missing-directory"):
        await store.connect()
    assert not store.is_open
