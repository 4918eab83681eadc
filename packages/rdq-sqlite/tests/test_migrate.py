"""The schema: created with a new file, upgraded only by ``migrate``, and checked against the
version this release knows before any operation runs."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from rdq.errors import StorageError
from rdq.spi import Envelope
from rdq_sqlite import SqliteStorage
from rdq_sqlite._migrate import LATEST


def user_version(database: Path) -> int:
    conn = sqlite3.connect(database)
    try:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
        return version
    finally:
        conn.close()


@pytest.mark.asyncio
async def test_a_new_file_gets_the_schema_when_the_store_connects(url: str, database: Path) -> None:
    async with SqliteStorage.from_url(url) as store:
        assert await store.enqueue(Envelope(id="a", queue="q", handler_ref="m:f"))
    assert user_version(database) == LATEST


@pytest.mark.asyncio
async def test_a_database_without_the_schema_says_to_run_migrate(url: str, database: Path) -> None:
    conn = sqlite3.connect(database)
    conn.execute("CREATE TABLE someone_elses (x INTEGER)")
    conn.commit()
    conn.close()
    async with SqliteStorage.from_url(url) as store:
        with pytest.raises(StorageError, match="rdq migrate"):
            await store.stats("q")
        with pytest.raises(StorageError, match="rdq migrate"):
            await store.enqueue(Envelope(id="a", queue="q", handler_ref="m:f"))
        await store.migrate()
        await store.migrate()  # idempotent
        assert await store.enqueue(Envelope(id="a", queue="q", handler_ref="m:f"))
    assert user_version(database) == LATEST


@pytest.mark.asyncio
async def test_a_schema_newer_than_this_release_is_refused_at_connect(
    url: str, database: Path
) -> None:
    async with SqliteStorage.from_url(url):
        pass
    conn = sqlite3.connect(database)
    conn.execute(f"PRAGMA user_version = {LATEST + 1}")
    conn.commit()
    conn.close()
    store = SqliteStorage.from_url(url)
    async with store:
        with pytest.raises(StorageError, match="upgrade rdq-sqlite"):
            await store.get("a")
        with pytest.raises(StorageError, match="upgrade rdq-sqlite"):
            await store.migrate()


@pytest.mark.asyncio
async def test_many_stores_connecting_and_migrating_at_once_apply_the_schema_once(
    url: str, database: Path
) -> None:
    stores = [SqliteStorage.from_url(url) for _ in range(6)]

    async def start(store: SqliteStorage) -> None:
        await store.connect()
        await store.migrate()

    try:
        await asyncio.gather(*(start(store) for store in stores))
        for n, store in enumerate(stores):
            assert await store.enqueue(Envelope(id=f"t{n}", queue="q", handler_ref="m:f"))
        assert (await stores[0].stats("q")).pending == len(stores)
    finally:
        for store in stores:
            await store.aclose()
    assert user_version(database) == LATEST
