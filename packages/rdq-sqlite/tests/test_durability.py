"""What is acknowledged stays: a process SIGKILLed mid-stream loses no acknowledged enqueue or
completion, and the database runs in WAL mode with every commit synced."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from rdq.spi import Envelope, Status
from rdq_sqlite import SqliteStorage

ACKER = Path(__file__).with_name("acker.py")


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_process_killed_mid_stream_loses_nothing_it_acknowledged(
    url: str, database: Path
) -> None:
    async with SqliteStorage.from_url(url) as store:
        await store.migrate()
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ACKER), url, "acked", stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    enqueued: list[str] = []
    completed: list[str] = []
    try:
        # stop it at an arbitrary moment once it has acknowledged a fair amount
        while len(enqueued) < 150:
            line = (await process.stdout.readline()).decode()
            assert line, "the writer process stopped by itself"
            kind, task_id = line.split()
            (enqueued if kind == "enqueued" else completed).append(task_id)
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
    assert completed

    async with SqliteStorage.from_url(url) as store:
        for task_id in enqueued:
            await store.get(task_id)  # NotFound would fail the test
        for task_id in completed:
            task = await store.get(task_id)
            assert task.status == Status.SUCCEEDED
            assert task.attempt_count == 1
        stats = await store.stats("acked")
        assert stats.succeeded >= len(completed)
        assert stats.pending + stats.in_flight + stats.succeeded >= len(enqueued)


@pytest.mark.asyncio
async def test_the_database_is_in_wal_mode_with_every_commit_synced(
    store: SqliteStorage, database: Path
) -> None:
    # journal_mode is a property of the file: any connection sees it
    outside = sqlite3.connect(database)
    try:
        assert outside.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        outside.close()
    # synchronous is a property of each connection: the store's own write connection
    writer = store._writer  # white-box: the setting cannot be observed from outside
    assert writer is not None
    level = await writer.call(
        lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0], "plain"
    )
    assert level == 2  # FULL


@pytest.mark.asyncio
async def test_tasks_survive_closing_and_reopening_the_store(url: str) -> None:
    async with SqliteStorage.from_url(url) as store:
        await store.enqueue(Envelope(id="kept", queue="q", handler_ref="m:f", payload=[1, 2]))
    async with SqliteStorage.from_url(url) as store:
        assert (await store.get("kept")).payload == [1, 2]
