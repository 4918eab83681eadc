"""The whole compliance kit (the cross-process and kill -9 clauses included) against SQLite:
a database file that several processes share, and the in-memory database."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from rdq import open_storage
from rdq.spi import CONTRACT_VERSION, Capabilities, Storage
from rdq_compliance import CorruptTaskWriter, StorageSuite
from rdq_sqlite import SqliteStorage
from rdq_sqlite.testing import put_corrupt_task


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One database file for the module's tests (each test uses its own queues and ids)."""
    return tmp_path_factory.mktemp("kit") / "rdq.db"


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
        return Capabilities(
            contract_version=CONTRACT_VERSION,
            notify=True,
            filter_pushdown=True,
            batch_enqueue=True,
            batch_complete=True,
            group_pushdown=True,
            priorities=True,
            claim_holder=True,
            cancel=True,
            task_listing=True,
            queue_listing=True,
            import_tasks=True,
            audit=True,
            reopen=True,
            control=True,
            worker_registry=True,
            counters=True,
            backup=True,
            fair_shares=True,
            priority_aging=True,
            retention=True,
            dedup=True,
            payload_refs=True,
            discard_succeeded=True,
        )

    @pytest.fixture
    def corrupt_task(self, storage: Storage) -> CorruptTaskWriter:
        if not isinstance(storage, SqliteStorage):
            raise TypeError(f"not a SqliteStorage: {storage!r}")
        return functools.partial(put_corrupt_task, storage)


class TestSqliteInMemoryKeepsTheContract(StorageSuite):
    """``sqlite:///:memory:`` is private to its store: no cross-process clauses."""

    @pytest_asyncio.fixture
    async def storage(self) -> AsyncIterator[Storage]:
        async with open_storage("sqlite:///:memory:") as store:
            await store.migrate()
            yield store

    @pytest.fixture
    def expected_capabilities(self) -> Capabilities:
        return Capabilities(
            contract_version=CONTRACT_VERSION,
            notify=True,
            filter_pushdown=True,
            batch_enqueue=True,
            batch_complete=True,
            group_pushdown=True,
            priorities=True,
            claim_holder=True,
            cancel=True,
            task_listing=True,
            queue_listing=True,
            import_tasks=True,
            audit=True,
            reopen=False,  # no second connection reaches it
            control=True,
            worker_registry=True,
            counters=True,
            backup=True,
            fair_shares=True,
            priority_aging=True,
            retention=True,
            dedup=True,
            payload_refs=True,
            discard_succeeded=True,
        )

    @pytest.fixture
    def corrupt_task(self, storage: Storage) -> CorruptTaskWriter:
        if not isinstance(storage, SqliteStorage):
            raise TypeError(f"not a SqliteStorage: {storage!r}")
        return functools.partial(put_corrupt_task, storage)
