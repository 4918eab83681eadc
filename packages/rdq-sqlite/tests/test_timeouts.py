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
PATIENCE = 60.0
"""What a test allows where the store is not meant to time out (only a hang reaches it)."""


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
    async with (
        SqliteStorage.from_url(url, timeout=TIMEOUT) as short,
        SqliteStorage.from_url(url, timeout=PATIENCE) as store,  # for the test's own reads
    ):
        await store.enqueue(Envelope(id="before", queue="q", handler_ref="m:f"))
        held_write_lock.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        # The lock is never released while it waits: the store's 0.5 s is what ends the wait
        # (the message names it), PATIENCE only bounds a store that waits for ever.
        with pytest.raises(StorageUnavailable, match=r"locked .* whole 0\.5 s operation timeout"):
            await asyncio.wait_for(
                short.enqueue(Envelope(id="during", queue="q", handler_ref="m:f")), PATIENCE
            )
        # It waited (giving up at most one short pause before its deadline), not refused at
        # once; load can only make this longer.
        assert time.monotonic() - started >= TIMEOUT * 0.8
        # reads go on beside the writer (WAL) ...
        assert (await short.get("before")).id == "before"
        # ... and once the lock is released, writes do too
        held_write_lock.execute("ROLLBACK")
        assert await short.enqueue(Envelope(id="after", queue="q", handler_ref="m:f"))
        assert [c.task.id for c in await store.claim_due("q", 5, timedelta(seconds=30))] == [
            "before",
            "after",
        ]


@pytest.mark.asyncio
async def test_a_write_that_gets_the_lock_before_the_timeout_succeeds(
    url: str, held_write_lock: sqlite3.Connection
) -> None:
    async with SqliteStorage.from_url(url, timeout=PATIENCE) as store:
        writer = store._writer  # white-box: to see the write refused by the lock
        assert writer is not None
        held_write_lock.execute("BEGIN IMMEDIATE")
        enqueue = asyncio.create_task(
            store.enqueue(Envelope(id="waits", queue="q", handler_ref="m:f"))
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PATIENCE
        while not (writer._running is not None and writer._running.locked_out):
            assert not enqueue.done(), enqueue
            assert loop.time() < deadline, "the write never met the lock"
            await asyncio.sleep(0.01)
        held_write_lock.execute("COMMIT")  # released long before the store's timeout
        assert await asyncio.wait_for(enqueue, PATIENCE)
        assert (await store.get("waits")).id == "waits"


@pytest.mark.asyncio
async def test_a_statement_running_past_the_timeout_is_interrupted(url: str) -> None:
    async with SqliteStorage.from_url(url, timeout=TIMEOUT) as store:
        writer = store._writer  # white-box: no contract operation can be made to run forever
        assert writer is not None
        forever = (
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
        )
        with pytest.raises(StorageUnavailable, match=r"within its 0\.5 s timeout"):
            await writer.call(lambda conn: conn.execute(forever).fetchone(), Mode.WRITE)
        # The connection was stopped, not lost: the link runs the next operation (were the
        # statement still running, this one would wait behind it for ever).
        one = await asyncio.wait_for(
            writer.call(lambda conn: conn.execute("SELECT 1").fetchone(), Mode.WRITE, timeout=None),
            PATIENCE,
        )
        assert tuple(one) == (1,)
    async with SqliteStorage.from_url(url, timeout=PATIENCE) as store:
        assert await store.enqueue(Envelope(id="next", queue="q", handler_ref="m:f"))
        assert (await store.get("next")).id == "next"


@pytest.mark.asyncio
async def test_an_unopenable_file_raises_storage_unavailable(tmp_path: Path) -> None:
    store = SqliteStorage.from_url(f"sqlite:///{tmp_path}/missing-directory/rdq.db")
    with pytest.raises(StorageUnavailable, match="missing-directory"):
        await store.connect()
    assert not store.is_open
