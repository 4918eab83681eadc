"""The whole compliance kit against the Mongo test server (SecantusDB unless
``RDQ_TEST_MONGO_URL`` names a real mongod)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from rdq.spi import Capabilities
from rdq_compliance import CorruptTaskWriter, StorageSuite
from rdq_mongo import MongoStorage

CORRUPT_KINDS: dict[str, dict[str, Any]] = {
    "undecodable": {},  # write_corrupt's own: a body that is not JSON
    "deep": {"body": '{"payload": ' + "[" * 5000 + "]" * 5000 + "}"},
    "far_time": {"created_at": 10**18},  # microseconds: the year 33658
}

EXPECTED = Capabilities(
    reopen=True,
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
        async def write(queue: str, task_id: str, kind: str = "undecodable") -> None:
            await write_corrupt(queue, task_id, **CORRUPT_KINDS[kind])

        return write
