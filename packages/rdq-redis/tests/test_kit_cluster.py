"""The whole compliance kit against a real three-node Redis Cluster (``cluster=true``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from redis.asyncio.cluster import RedisCluster

from rdq import open_storage
from rdq.spi import Envelope, Storage
from rdq_compliance import StorageSuite


class TestRedisClusterCompliance(StorageSuite):
    @pytest_asyncio.fixture
    async def storage_url(self, redis_cluster_url: str) -> AsyncIterator[str]:
        prefix = f"rdqtest-{uuid.uuid4().hex[:12]}"
        yield f"{redis_cluster_url}&prefix={prefix}"
        client = RedisCluster.from_url(redis_cluster_url.split("?")[0])
        try:
            async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                await client.unlink(key)
        finally:
            await client.aclose()

    @pytest_asyncio.fixture
    async def storage(self, storage_url: str) -> AsyncIterator[Storage]:
        async with open_storage(storage_url) as store:
            await store.migrate()
            yield store


@pytest.mark.asyncio
async def test_cluster_keys_of_a_queue_share_a_slot_and_ids_spread(redis_cluster_url: str) -> None:
    prefix = f"rdqtest-{uuid.uuid4().hex[:12]}"
    async with open_storage(redis_cluster_url, prefix=prefix) as store:
        ids = [f"t-{n}" for n in range(30)]
        await store.enqueue_batch([Envelope(id=i, queue="one", handler_ref="h") for i in ids])
    client = RedisCluster.from_url(redis_cluster_url.split("?")[0])
    try:
        queue_slots = {
            await client.cluster_keyslot(k)
            async for k in client.scan_iter(match=f"{prefix}:{{one}}:*")
        }
        index_slots = {await client.cluster_keyslot(f"{prefix}:id:{{{i}}}") for i in ids}
    finally:
        await client.aclose()
    assert len(queue_slots) == 1
    assert len(index_slots) > 1
