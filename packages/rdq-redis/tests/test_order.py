"""Claim orders of contract version 4 on Redis beyond the kit: queues deeper than the page the
claim script reads each sorted set in (``ORDER_PAGE`` in ``lua/_order.lua``), with tasks
moved aside to held sets and read back from them in the middle of a claim, checked against
``rdq.spi.ClaimOrder`` claim by claim."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from rdq.spi import QUEUE_KEY, ClaimOrder, Control, Envelope, Status, Storage, handler_key

LEASE = timedelta(minutes=5)
PAUSED, PLAIN = "tests.handlers:paused", "tests.handlers:plain"
PAGE = 512  # lua/_order.lua's ORDER_PAGE


def new_queue() -> str:
    return f"order-{uuid.uuid4().hex[:12]}"


async def _put(storage: Storage, control: Control) -> Control:
    found = {c.key: c for c in await storage.list_controls(control.queue)}.get(control.key)
    return await storage.put_control(control, expected_version=found.version if found else 0)


def _due(task: Envelope) -> datetime:
    assert task.next_attempt_at is not None
    return task.next_attempt_at


def _arranged(order: ClaimOrder, tasks: Sequence[Envelope]) -> list[str]:
    return [
        t.id
        for t in order.arrange(
            tasks, priority=lambda t: t.priority, due=_due, keys=lambda t: t.keys
        )
    ]


async def _backlog(storage: Storage, queue: str, specs: Sequence[dict[str, Any]]) -> list[Envelope]:
    """One task per spec, all due, the n-th later than the one before (no two due at once)."""
    now = await storage.now()
    tasks = [
        Envelope(
            id=f"{queue}-{n:05d}",
            queue=queue,
            handler_ref=spec.get("handler_ref", PLAIN),
            priority=spec.get("priority", 0),
            keys=spec.get("keys", []),
            next_attempt_at=now - timedelta(seconds=2000 - 1500 * n / len(specs)),
        )
        for n, spec in enumerate(specs)
    ]
    for start in range(0, len(tasks), 200):
        assert all(await storage.enqueue_batch(tasks[start : start + 200]))
    return tasks


async def _claimed(storage: Storage, queue: str, limit: int) -> list[str]:
    return [c.task.id for c in await storage.claim_due(queue, limit, LEASE)]


@pytest.mark.asyncio
async def test_an_aged_queue_deeper_than_a_page_keeps_its_order_past_tasks_moved_aside(
    storage: Storage,
) -> None:
    queue = new_queue()
    # The oldest page and a half are a paused handler's (the first claim moves them aside on
    # its way: fewer than the 1000 a claim may move), the rest mixes priorities; one in 7 has
    # dep:x, whose gate lets 25 through.
    specs: list[dict[str, Any]] = [{"handler_ref": PAUSED} for _ in range(PAGE + PAGE // 2)]
    specs += [
        {"priority": n % 7 - 3, "keys": ["dep:x"] if n % 7 == 0 else []} for n in range(3 * PAGE)
    ]
    tasks = await _backlog(storage, queue, specs)
    await _put(storage, Control(queue=queue, key=handler_key(PAUSED), paused=True))
    await _put(storage, Control(queue=queue, key="dep:x", gate=25))
    order = ClaimOrder(aging=3.0)
    await _put(storage, Control(queue=queue, key=QUEUE_KEY, aging=order.aging))
    by_id = {t.id: t for t in tasks}
    gate = 25
    wanted = []
    for task_id in _arranged(order, [t for t in tasks if t.handler_ref == PLAIN]):
        if "dep:x" in by_id[task_id].keys:
            if gate == 0:
                continue
            gate -= 1
        wanted.append(task_id)
    got: list[str] = []
    while claimed := await _claimed(storage, queue, 40):
        got += claimed
    assert got == wanted, "every claim of 40 takes the next 40 by aged due time the gate admits"
    # the paused handler's tasks, moved aside, come back in aged order once it is resumed
    await _put(storage, Control(queue=queue, key=handler_key(PAUSED)))
    paused = [t for t in tasks if t.handler_ref == PAUSED]
    got = []
    while claimed := await _claimed(storage, queue, 3 * PAGE // 2):
        got += claimed
    assert got == _arranged(order, paused)
    held = [t for t in tasks if "dep:x" in t.keys and t.id not in wanted]
    assert {(await storage.get(t.id)).status for t in held} == {Status.PENDING}


@pytest.mark.asyncio
async def test_a_fair_queue_deeper_than_a_page_ranks_every_group_at_every_claim(
    storage: Storage,
) -> None:
    queue = new_queue()
    # a deep group (its oldest page and a half a paused handler's, moved aside as the claim
    # reads on), a middling one with priorities, the tasks without a tenant, and a shallow group due
    # last of all
    specs: list[dict[str, Any]] = [
        {"keys": ["tenant:deep"], "handler_ref": PAUSED} for _ in range(PAGE + PAGE // 2)
    ]
    for n in range(3 * PAGE):
        specs.append({"keys": ["tenant:deep"]})
        if n % 4 == 0:
            specs.append({"keys": ["dep:y", "tenant:mid"], "priority": n % 3})
        if n % 9 == 0:
            specs.append({"keys": ["dep:y"]})
    specs += [{"keys": ["tenant:shallow"]} for _ in range(3)]
    tasks = await _backlog(storage, queue, specs)
    await _put(storage, Control(queue=queue, key=handler_key(PAUSED), paused=True))
    order = ClaimOrder(fair="tenant:")
    await _put(storage, Control(queue=queue, key=QUEUE_KEY, fair=order.fair))
    left = [t for t in tasks if t.handler_ref == PLAIN]
    for claim in range(12):
        got = await _claimed(storage, queue, 10)
        wanted = _arranged(order, left)[:10]
        assert set(got) == set(wanted), f"claim {claim}"
        left = [t for t in left if t.id not in got]
    shallow = {t.id for t in tasks if "tenant:shallow" in t.keys}
    assert {(await storage.get(i)).status for i in shallow} == {Status.IN_FLIGHT}, (
        "the shallow group, due last, was claimed in the first claims"
    )


async def _commands_of_one_claim(
    redis_url: str, storage: Storage, queue: str
) -> tuple[int, list[str]]:
    """The Redis commands (counted by the server, the claim script's own included) that one
    claim of 10 issues, and the ids it took."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url)
    try:
        await client.config_resetstat()
        claimed = await storage.claim_due(queue, 10, LEASE)
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    skip = {"cmdstat_config", "cmdstat_info", "cmdstat_evalsha", "cmdstat_eval", "cmdstat_hello"}
    skip |= {"cmdstat_client", "cmdstat_publish", "cmdstat_subscribe", "cmdstat_ping"}
    calls = sum(v["calls"] for k, v in stats.items() if k not in skip and isinstance(v, dict))
    return calls, [c.task.id for c in claimed]


@pytest.mark.parametrize(
    "order",
    [ClaimOrder(fair="tenant:"), ClaimOrder(fair="tenant:", aging=2.0), ClaimOrder(aging=1.0)],
)
@pytest.mark.asyncio
async def test_an_ordered_claim_issues_as_many_commands_behind_a_backlog_ten_times_deeper(
    storage: Storage, redis_url: str, order: ClaimOrder
) -> None:
    """Deterministic, not a race of clocks: the commands one fair or aged claim script issues
    behind 1,500 and 15,000 due tasks of one tenant (and 3 of another) are about the same, so
    its time does not grow with the backlog (it read every due task: 10x the commands)."""
    work: list[int] = []
    for depth in (1_500, 15_000):
        queue = new_queue()
        await _put(storage, Control(queue=queue, key=QUEUE_KEY, fair=order.fair, aging=order.aging))
        await _backlog(
            storage,
            queue,
            [{"keys": ["tenant:big"]}] * depth + [{"keys": ["tenant:small"]}] * 3,
        )
        calls, took = await _commands_of_one_claim(redis_url, storage, queue)
        assert len(took) == 10
        if order.fair:
            assert sum(int(t.rsplit("-", 1)[1]) >= depth for t in took) == 3
        work.append(calls)
    assert work[1] <= work[0] * 1.5 + 20, work


@pytest.mark.asyncio
async def test_a_queue_made_fair_before_the_group_sets_existed_is_regrouped_by_its_first_claim(
    storage: Storage, redis_url: str, key_prefix: str
) -> None:
    """A store upgraded with a fair queue: its tasks have no group and there are no group sets
    (removed here by hand); the first claim builds them and shares the queue."""
    import redis.asyncio as aioredis

    from rdq_redis._keys import QueueKeys

    queue = new_queue()
    await _put(storage, Control(queue=queue, key=QUEUE_KEY, fair="tenant:"))
    specs = [{"keys": ["tenant:big"]}] * 30 + [{"keys": ["tenant:small"]}] * 2
    await _backlog(storage, queue, specs)
    base = QueueKeys(key_prefix, queue).base
    client = aioredis.from_url(redis_url)
    try:
        names = await client.smembers(f"{base}fairsets")
        assert len(names) == 2, names  # fair:0:tenant:big, fair:0:tenant:small
        for name in names:
            assert await client.delete(f"{base}{name.decode()}") == 1
        await client.delete(f"{base}fairsets", f"{base}fairidx")
        for n in range(len(specs)):
            assert await client.hdel(f"{base}task:{queue}-{n:05d}", "fg") == 1
        claimed = await _claimed(storage, queue, 4)
        assert await client.get(f"{base}fairidx") == b"tenant:"
    finally:
        await client.aclose()
    assert claimed == [f"{queue}-00000", f"{queue}-00030", f"{queue}-00001", f"{queue}-00031"]
