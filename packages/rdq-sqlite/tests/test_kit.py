"""The whole compliance kit (the cross-process and kill -9 clauses included) against SQLite:
a database file that several processes share, and the in-memory database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
import pytest_asyncio

from rdq import open_storage
from rdq.spi import Capabilities, Storage
from rdq_compliance import CorruptTaskWriter, StorageSuite
from rdq_sqlite import SqliteStorage


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One database file for the module's tests (each test uses its own queues and ids)."""
    return tmp_path_factory.mktemp("kit") / "rdq.db"


EVERY_CAPABILITY = Capabilities(
    reopen=True,
    notify=True,
    filter_pushdown=True,
    batch_enqueue=True,
    batch_complete=True,
    group_pushdown=True,
)


class TestSqliteFileKeepsTheContract(StorageSuite):
    @pytest.fixture
    def storage_url(self, database: Path) -> str:
        return f"sqlite:///{database}"

    @pytest_asyncio.fixture
    async def storage(self, storage_url: str) -> AsyncIterator[Storage]:
        async with open_storage(storage_url) as store:
            await store.migrate()
            yield store

    @pytest.fixture
    def expected_capabilities(self) -> Capabilities:
        return EVERY_CAPABILITY

    @pytest.fixture
    def corrupt_task(self, storage: Storage) -> CorruptTaskWriter:
        if not isinstance(storage, SqliteStorage):
            raise TypeError(f"not a SqliteStorage: {storage!r}")
        return storage.put_corrupt_task


class TestSqliteInMemoryKeepsTheContract(StorageSuite):
    """``sqlite:///:memory:`` is private to its store: no cross-process clauses."""

    @pytest_asyncio.fixture
    async def storage(self) -> AsyncIterator[Storage]:
        async with open_storage("sqlite:///:memory:") as store:
            await store.migrate()
            yield store

    @pytest.fixture
    def expected_capabilities(self) -> Capabilities:
        return msgspec.structs.replace(EVERY_CAPABILITY, reopen=False)  # no second connection

    @pytest.fixture
    def corrupt_task(self, storage: Storage) -> CorruptTaskWriter:
        if not isinstance(storage, SqliteStorage):
            raise TypeError(f"not a SqliteStorage: {storage!r}")
        return storage.put_corrupt_task
