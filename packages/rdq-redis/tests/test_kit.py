"""The whole compliance kit against a real Redis, each test under a key prefix of its own."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from rdq import open_storage
from rdq.spi import CONTRACT_VERSION, Capabilities, Storage
from rdq_compliance import CorruptTaskWriter, StorageSuite
from rdq_redis import RedisStorage
from rdq_redis.testing import put_corrupt_task

EXPECTED_CAPABILITIES = Capabilities(
    contract_version=CONTRACT_VERSION,
    notify=True,
    filter_pushdown=True,
    batch_enqueue=True,
    batch_complete=True,
    overlapping_completions=True,
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
)
"""What the Redis store advertises, on one server and on Cluster alike: everything but
``transactional_enqueue``."""


class TestRedisCompliance(StorageSuite):
    @pytest.fixture
    def storage_url(self, redis_storage_url: str) -> str:
        return redis_storage_url

    @pytest_asyncio.fixture
    async def storage(self, storage_url: str) -> AsyncIterator[Storage]:
        async with open_storage(storage_url) as store:
            await store.migrate()
            yield store

    @pytest.fixture
    def expected_capabilities(self) -> Capabilities:
        return EXPECTED_CAPABILITIES

    @pytest.fixture
    def corrupt_task(self, storage: Storage) -> CorruptTaskWriter:
        assert isinstance(storage, RedisStorage)
        return functools.partial(put_corrupt_task, storage)
