"""The whole compliance kit against the Mongo test server (SecantusDB unless
``RDQ_TEST_MONGO_URL`` names a real mongod)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio

from rdq.spi import Capabilities
from rdq_compliance import CorruptTaskWriter, StorageSuite
from rdq_mongo import MongoStorage

EXPECTED = Capabilities(
    notify=True,
    filter_pushdown=True,
    batch_enqueue=True,
    batch_complete=True,
    group_pushdown=True,
)


class TestMongoStorage(StorageSuite):
    @pytest.fixture
    def storage_url(self, database_url: str) -> str:
        return database_url

    @pytest_asyncio.fixture
    async def storage(self, store: MongoStorage) -> AsyncIterator[MongoStorage]:
        yield store

    @pytest.fixture
    def expected_capabilities(self) -> Capabilities:
        return EXPECTED

    @pytest.fixture
    def corrupt_task(self, write_corrupt: Callable[..., Awaitable[None]]) -> CorruptTaskWriter:
        async def write(queue: str, task_id: str) -> None:
            await write_corrupt(queue, task_id)

        return write
