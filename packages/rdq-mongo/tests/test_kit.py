"""The whole compliance kit against the Mongo test server (SecantusDB unless
``RDQ_TEST_MONGO_URL`` names a real mongod)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from rdq.spi import Capabilities
from rdq_compliance import CorruptTaskWriter, StorageSuite
from rdq_mongo import MongoStorage
from rdq_mongo.testing import put_corrupt_task

EXPECTED = Capabilities(
    contract_version=5,
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
    fair_shares=True,
    priority_aging=True,
    retention=True,
    dedup=True,
    discard_succeeded=True,
    transactional_enqueue=False,
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
    def corrupt_task(self, store: MongoStorage) -> CorruptTaskWriter:
        return functools.partial(put_corrupt_task, store)
