"""Key layouts: data written by an older rdq-redis (layout 1: one pending and one in-flight
set per queue, no DLQ groups, no queue registry, no version key; layout 2: a task's
flow-control keys only inside its body) is refused with a clear error until ``migrate()``
upgrades it, and is then served as if written today."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from rdq import open_storage
from rdq.errors import StorageError
from rdq.spi import Attempt, Control, Envelope, Outcome, Page, Selector, Status, TaskFilter
from rdq_redis._codec import attempts_json, envelope_body
from rdq_redis._keys import LAYOUT

LEASE = timedelta(minutes=5)


async def write_layout_1(client: Any, prefix: str, queue: str) -> dict[str, str]:
    """Tasks of ``queue`` as rdq-redis wrote them before layout 2: two PENDING (due an hour
    ago), one IN_FLIGHT whose lease lapsed, two DEAD (one group), one SUCCEEDED."""
    (seconds, micros) = await client.time()
    now = seconds * 1_000_000 + micros
    hour = 3_600_000_000
    base = f"{prefix}:{{{queue}}}:"
    kinds = {
        "p1": ("PENDING", "pending", now - hour),
        "p2": ("PENDING", "pending", now - hour + 1),
        "f1": ("IN_FLIGHT", "inflight", now - hour + 2),
        "d1": ("DEAD", "dead", now - 2 * hour),
        "d2": ("DEAD", "dead", now - hour),
        "s1": ("SUCCEEDED", "succeeded", now - hour),
    }
    ids = {}
    for name, (status, set_name, score) in kinds.items():
        task_id = f"{queue}-{name}"
        ids[name] = task_id
        task = Envelope(id=task_id, queue=queue, handler_ref="app:work", payload={"n": name})
        fields: dict[str, str | bytes] = {
            "body": envelope_body(task),
            "status": status,
            "attempt_count": "1" if status != "PENDING" else "0",
            "redrive_count": "0",
            "attempts": attempts_json([]),
            "handler_ref": "app:work",
            "created_at": str(now - 3 * hour),
            "next_attempt_at": str(now - 3 * hour),
        }
        if status == "IN_FLIGHT":
            fields |= {"token": f"{queue}/old", "lease_expires_at": str(score)}
            fields["claimed_at"] = str(score - 60_000_000)
        if status == "DEAD":
            fields |= {"dead_lettered_at": str(score), "error_type": "Boom"}
            fields["attempts"] = b'[{"number":1,"outcome":"FAILED","error_type":"Boom"}]'
        if status == "SUCCEEDED":
            fields["completed_at"] = str(score)
        await client.hset(base + f"task:{task_id}", mapping=fields)  # type: ignore[arg-type]
        await client.zadd(base + set_name, {task_id: score})
        await client.set(f"{prefix}:id:{{{task_id}}}", queue)
    return ids


async def write_layout_2(store_url: str, client: Any, prefix: str, queue: str) -> dict[str, str]:
    """Tasks of ``queue`` with flow-control keys as rdq-redis wrote them in layout 2 (with an
    rdq-core that knew ``Envelope.keys``): the keys inside ``body`` only. One PENDING with a
    key, one without, one IN_FLIGHT with two keys, one DEAD and one SUCCEEDED with a key.
    Written by this release, then taken back to layout 2: the keys moved into the bodies, the
    version set to 2."""
    ids = {name: f"{queue}-{name}" for name in ("p1", "p2", "f1", "d1", "s1")}
    keys = {"p1": ["dep:psp"], "p2": [], "f1": ["dep:psp", "tenant:a"], "d1": ["dep:psp"]}
    keys["s1"] = ["x"]
    async with open_storage(store_url) as store:
        for name in ("f1", "d1", "s1", "p1", "p2"):  # claimed in this order
            task = Envelope(id=ids[name], queue=queue, handler_ref="app:work", keys=keys[name])
            await store.enqueue(task)
            if name in ("f1", "d1", "s1"):
                (claim,) = await store.claim_due(queue, 1, LEASE)
                done = Attempt(number=1, outcome=Outcome.FAILED, error_type="Boom")
                if name == "d1":
                    await store.dead_letter(claim.task.id, claim.token, done)
                elif name == "s1":
                    await store.complete(claim.task.id, claim.token, done)
    for name, task_id in ids.items():
        key = f"{prefix}:{{{queue}}}:task:{task_id}"
        body = msgspec.json.decode(await client.hget(key, "body"))
        body["keys"] = keys[name]
        await client.hset(key, "body", msgspec.json.encode(body))
        await client.hdel(key, "keys")
    await client.set(f"{prefix}:layout", "2")
    return ids


@pytest.mark.asyncio
async def test_layout_2_tasks_get_their_keys_from_migrate_and_claims_honour_them(
    redis_url: str, redis_storage_url: str, key_prefix: str
) -> None:
    queue = f"two-{uuid.uuid4().hex[:8]}"
    client = aioredis.Redis.from_url(redis_url)
    try:
        ids = await write_layout_2(redis_storage_url, client, key_prefix, queue)
        async with open_storage(redis_storage_url) as store:
            with pytest.raises(StorageError, match=r"layout 2 .*rdq migrate"):
                await store.claim_due(queue, 10, LEASE)
            assert await store.migrate() == ["key layout 2 -> 3"]
            assert await client.get(f"{key_prefix}:layout") == str(LAYOUT).encode()
            base = f"{key_prefix}:{{{queue}}}:task:"
            assert await client.hget(base + ids["p1"], "keys") == b"dep:psp"
            assert await client.hget(base + ids["f1"], "keys") == b"dep:psp\ntenant:a"
            assert not await client.hexists(base + ids["p2"], "keys")
            for name, keys in (("p1", ["dep:psp"]), ("s1", ["x"]), ("p2", [])):
                assert (await store.get(ids[name])).keys == keys

            await store.put_control(
                Control(queue=queue, key="dep:psp", paused=True), expected_version=0
            )
            (control,) = await store.list_controls(queue)
            assert control.in_use == 1, "the in-flight task's keys are counted"
            assert [c.task.id for c in await store.claim_due(queue, 10, LEASE)] == [ids["p2"]]
            assert await store.redrive(queue, Selector.by_ids(ids["d1"])) == 1
            assert await store.claim_due(queue, 10, LEASE) == [], "the redriven task too"
            assert await store.migrate() == []
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_layout_1_data_is_refused_until_migrate_upgrades_it(
    redis_url: str, redis_storage_url: str, key_prefix: str
) -> None:
    queue = f"old-{uuid.uuid4().hex[:8]}"
    client = aioredis.Redis.from_url(redis_url)
    try:
        ids = await write_layout_1(client, key_prefix, queue)
        async with (
            open_storage(redis_storage_url) as store,
            open_storage(redis_storage_url) as bystander,
        ):
            for probe in (store.stats(queue), store.claim_due(queue, 10, LEASE), store.get("x")):
                with pytest.raises(StorageError, match=r"layout 1 .*rdq migrate"):
                    await probe
            with pytest.raises(StorageError, match="rdq migrate"):
                await bystander.list_queues()

            assert await store.migrate() == ["key layout 1 -> 2", "key layout 2 -> 3"]
            assert await client.get(f"{key_prefix}:layout") == str(LAYOUT).encode()
            # Another store opened before the upgrade notices it without reconnecting.
            assert [s.queue for s in await bystander.list_queues()] == [queue]

            stats = await store.stats(queue)
            assert (stats.pending, stats.in_flight, stats.dlq_depth, stats.succeeded) == (
                2,
                1,
                2,
                1,
            )
            claimed = await store.claim_due(queue, 10, LEASE, worker_id="w-new")
            assert [c.task.id for c in claimed] == [ids["p1"], ids["p2"], ids["f1"]]
            reclaimed = claimed[2].task
            assert reclaimed.attempts[-1].outcome is Outcome.LEASE_EXPIRED
            assert reclaimed.attempt_count == 2
            assert all(c.task.corrupt is None and c.task.priority == 0 for c in claimed)

            (group,) = await store.dlq_groups(queue)
            assert (group.handler_ref, group.error_type, group.count) == ("app:work", "Boom", 2)
            dead, _ = await store.dlq_list(queue, None, Page(include_attempts=True))
            assert [t.id for t in dead] == [ids["d1"], ids["d2"]]
            assert group.first_dead_lettered_at == dead[0].dead_lettered_at
            done, _ = await store.list_tasks(queue, TaskFilter(status=Status.SUCCEEDED), Page())
            assert [t.id for t in done] == [ids["s1"]]

            assert await store.migrate() == []  # idempotent: nothing left to upgrade
            assert await store.dlq_groups(queue) == [group]
            assert not await client.exists(
                f"{key_prefix}:{{{queue}}}:pending", f"{key_prefix}:{{{queue}}}:inflight"
            )
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_keys_of_a_newer_layout_are_refused_even_by_migrate(
    redis_url: str, redis_storage_url: str, key_prefix: str
) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        await client.set(f"{key_prefix}:layout", str(LAYOUT + 1))
        async with open_storage(redis_storage_url) as store:
            with pytest.raises(StorageError, match=f"layout {LAYOUT + 1}.*newer"):
                await store.stats("q")
            with pytest.raises(StorageError, match="upgrade rdq-redis"):
                await store.migrate()
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_a_fresh_prefix_is_marked_with_the_current_layout_on_first_open(
    redis_url: str, redis_storage_url: str, key_prefix: str
) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        assert await client.get(f"{key_prefix}:layout") is None
        async with open_storage(redis_storage_url) as store:
            assert await store.enqueue(Envelope(id="fresh", queue="q", handler_ref="h"))
        assert await client.get(f"{key_prefix}:layout") == str(LAYOUT).encode()
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_dlq_groups_keep_handler_refs_and_error_types_with_separators_apart(
    redis_storage_url: str,
) -> None:
    queue = f"groups-{uuid.uuid4().hex[:8]}"
    cases = [("a:b=c", "Boom"), ("a:b", "c=Boom"), ("h\u00e9", None), ("h\u00e9", ""), ("h", "x")]
    async with open_storage(redis_storage_url) as store:
        for n, (handler, error) in enumerate(cases):
            await store.enqueue(Envelope(id=f"{queue}-{n}", queue=queue, handler_ref=handler))
            (claim,) = await store.claim_due(queue, 1, LEASE)
            failed = Attempt(number=1, outcome=Outcome.FAILED, error_type=error)
            await store.dead_letter(claim.task.id, claim.token, failed)
        groups = await store.dlq_groups(queue)
    assert {(g.handler_ref, g.error_type, g.count) for g in groups} == {
        (handler, error, 1) for handler, error in cases
    }
