"""The whole compliance kit against a real three-node Redis Cluster (``cluster=true``)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import pytest_asyncio
from redis.asyncio.cluster import RedisCluster

from rdq import open_storage
from rdq.errors import IDConflict, NotFound, StorageError
from rdq.spi import (
    Attempt,
    Capabilities,
    Control,
    Counts,
    Envelope,
    Outcome,
    Selector,
    Storage,
    WorkerInfo,
)
from rdq_compliance import CorruptTaskWriter, StorageSuite
from rdq_redis import RedisStorage
from rdq_redis.testing import put_corrupt_task

from .test_kit import EXPECTED_CAPABILITIES
from .test_layout import write_layout_1, write_layout_2

_MINUTE = datetime(2031, 5, 6, 7, 8, tzinfo=UTC)


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

    @pytest.fixture
    def expected_capabilities(self) -> Capabilities:
        return EXPECTED_CAPABILITIES

    @pytest.fixture
    def corrupt_task(self, storage: Storage) -> CorruptTaskWriter:
        assert isinstance(storage, RedisStorage)
        return functools.partial(put_corrupt_task, storage)


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


@pytest.mark.asyncio
async def test_cluster_purges_free_the_ids_for_other_queues(redis_cluster_url: str) -> None:
    prefix = f"rdqtest-{uuid.uuid4().hex[:12]}"
    lease = timedelta(minutes=5)
    async with open_storage(redis_cluster_url, prefix=prefix) as store:
        await store.enqueue_batch([Envelope(id=i, queue="first", handler_ref="h") for i in "ab"])
        (dead, done) = await store.claim_due("first", 2, lease)
        await store.dead_letter(dead.task.id, dead.token, Attempt(number=1, outcome=Outcome.FAILED))
        await store.complete(done.task.id, done.token, Attempt(number=1, outcome=Outcome.SUCCEEDED))
        with pytest.raises(IDConflict):
            await store.enqueue(Envelope(id=dead.task.id, queue="second", handler_ref="h"))

        assert await store.purge("first", Selector.by_ids(dead.task.id)) == 1
        cutoff = (await store.stats("first")).as_of + timedelta(seconds=1)
        assert await store.purge_succeeded("first", cutoff) == 1

        for task_id in "ab":
            assert await store.enqueue(Envelope(id=task_id, queue="second", handler_ref="h"))
            assert (await store.get(task_id)).queue == "second"


@pytest.mark.asyncio
async def test_cluster_batch_over_several_queues_refuses_a_conflict_before_writing(
    redis_cluster_url: str,
) -> None:
    prefix = f"rdqtest-{uuid.uuid4().hex[:12]}"
    async with open_storage(redis_cluster_url, prefix=prefix) as store:
        await store.enqueue(Envelope(id="taken", queue="elsewhere", handler_ref="h"))
        batch = [
            Envelope(id=f"{queue}-{n}", queue=queue, handler_ref="h")
            for queue in ("q1", "q2", "q3")
            for n in range(3)
        ]
        with pytest.raises(IDConflict):
            await store.enqueue_batch([*batch, Envelope(id="taken", queue="q3", handler_ref="h")])
        for task in batch:
            with pytest.raises(NotFound):
                await store.get(task.id)
        # nothing was reserved either: the ids are free for any queue
        assert await store.enqueue_batch(
            [Envelope(id=t.id, queue="q4", handler_ref="h") for t in batch]
        ) == [True] * len(batch)


@pytest.mark.asyncio
async def test_cluster_migrate_upgrades_layout_1_queues_on_every_node(
    redis_cluster_url: str,
) -> None:
    prefix = f"rdqtest-{uuid.uuid4().hex[:12]}"
    client = RedisCluster.from_url(redis_cluster_url.split("?")[0])
    queues = [f"old-{n}" for n in range(6)]  # spread over the nodes by their hash tags
    try:
        assert len({await client.cluster_keyslot(f"{prefix}:{{{q}}}:dead") for q in queues}) > 1
        for queue in queues:
            await write_layout_1(client, prefix, queue)
        async with open_storage(redis_cluster_url, prefix=prefix) as store:
            with pytest.raises(StorageError, match="rdq migrate"):
                await store.list_queues()
            await store.migrate()
            assert [s.queue for s in await store.list_queues()] == queues
            for queue in queues:
                stats = await store.stats(queue)
                assert (stats.pending, stats.in_flight, stats.dlq_depth) == (2, 1, 2)
                assert len(await store.claim_due(queue, 10, timedelta(minutes=5))) == 3
                (group,) = await store.dlq_groups(queue)
                assert group.count == 2
    finally:
        async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            await client.unlink(key)
        await client.aclose()


@pytest.mark.asyncio
async def test_cluster_registry_drops_a_queue_its_purges_emptied(redis_cluster_url: str) -> None:
    prefix = f"rdqtest-{uuid.uuid4().hex[:12]}"
    lease = timedelta(minutes=5)
    async with open_storage(redis_cluster_url, prefix=prefix) as store:
        await store.enqueue_batch(
            [Envelope(id=f"{q}-1", queue=q, handler_ref="h") for q in ("kept", "gone")]
        )
        assert [s.queue for s in await store.list_queues()] == ["gone", "kept"]
        (claim,) = await store.claim_due("gone", 1, lease)
        await store.dead_letter(
            claim.task.id, claim.token, Attempt(number=1, outcome=Outcome.FAILED)
        )
        assert await store.purge("gone", Selector.by_ids(claim.task.id)) == 1
        assert [s.queue for s in await store.list_queues()] == ["kept"]
        client = RedisCluster.from_url(redis_cluster_url.split("?")[0])
        try:
            assert await client.smembers(f"{prefix}:queues") == {b"kept"}
        finally:
            async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                await client.unlink(key)
            await client.aclose()


@pytest.mark.asyncio
async def test_cluster_controls_of_queues_on_every_node_are_listed_and_forgotten(
    redis_cluster_url: str,
) -> None:
    prefix = f"rdqtest-{uuid.uuid4().hex[:12]}"
    queues = [f"ctl-{n}" for n in range(6)]  # spread over the nodes by their hash tags
    client = RedisCluster.from_url(redis_cluster_url.split("?")[0])
    try:
        assert len({await client.cluster_keyslot(f"{prefix}:{{{q}}}:controls") for q in queues}) > 1
        async with open_storage(redis_cluster_url, prefix=prefix) as store:
            for queue in queues:
                await store.enqueue(Envelope(id=f"{queue}-1", queue=queue, handler_ref="h"))
                await store.put_control(
                    Control(queue=queue, key="*", paused=True), expected_version=0
                )
                assert await store.claim_due(queue, 10, timedelta(minutes=5)) == []
            listed = await store.list_controls()
            assert [(c.queue, c.key, c.paused) for c in listed] == [(q, "*", True) for q in queues]
            assert await store.delete_control(queues[0], "*", expected_version=1)
            assert await client.smembers(f"{prefix}:controlled") == {q.encode() for q in queues[1:]}
            assert len(await store.claim_due(queues[0], 10, timedelta(minutes=5))) == 1

            await store.heartbeat_worker(WorkerInfo(id="w-1"))
            await store.add_counts([Counts(queue=queues[1], minute=_MINUTE, succeeded=1)])
        slots: dict[str, set[int]] = {"_workers": set(), "_counts": set()}
        async for raw in client.scan_iter(match=f"{prefix}:{{_*", count=1000):
            key = raw.decode()
            tag = key.split("{", 1)[1].split("}", 1)[0]
            slots.setdefault(tag, set()).add(await client.cluster_keyslot(key))
        assert len(slots["_workers"]) == 1 and len(slots["_counts"]) == 1
    finally:
        async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            await client.unlink(key)
        await client.aclose()


@pytest.mark.asyncio
async def test_cluster_migrate_upgrades_layout_2_keys(redis_cluster_url: str) -> None:
    prefix = f"rdqtest-{uuid.uuid4().hex[:12]}"
    url = f"{redis_cluster_url}&prefix={prefix}"
    client = RedisCluster.from_url(redis_cluster_url.split("?")[0])
    try:
        ids = await write_layout_2(url, client, prefix, "two")
        async with open_storage(url) as store:
            assert await store.migrate() == ["key layout 2 -> 3"]
            assert (await store.get(ids["p1"])).keys == ["dep:psp"]
            await store.put_control(
                Control(queue="two", key="dep:psp", paused=True), expected_version=0
            )
            claimed = await store.claim_due("two", 10, timedelta(minutes=5))
            assert [c.task.id for c in claimed] == [ids["p2"]]
    finally:
        async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            await client.unlink(key)
        await client.aclose()
