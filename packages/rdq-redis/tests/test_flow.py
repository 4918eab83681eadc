"""Flow control on Redis beyond the kit: what a claim costs with and without controls, the
held sets a claim moves held-back tasks into (a deep paused backlog costs later claims
nothing; held tasks stay visible as what they are and come back in claim order), lapsed leases
held back, wake-ups, and where the registry and the counts live."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from rdq.spi import (
    QUEUE_KEY,
    Attempt,
    Control,
    Counts,
    Envelope,
    Outcome,
    Page,
    Status,
    Storage,
    TaskFilter,
    WorkerInfo,
    handler_key,
)

LEASE = timedelta(minutes=5)
A, B = "tests.handlers:a", "tests.handlers:b"


def new_queue() -> str:
    return f"flow-{uuid.uuid4().hex[:12]}"


def new_task(queue: str, n: int | None = None, **fields: Any) -> Envelope:
    """A task of ``queue``; tasks numbered ``n`` have ids in that order (a batch's tasks are
    due at the same microsecond: they are claimed by id)."""
    fields.setdefault("handler_ref", B)
    task_id = f"t-{uuid.uuid4().hex}" if n is None else f"{queue}-{n:06d}"
    return Envelope(id=task_id, queue=queue, **fields)


async def _commands(client: aioredis.Redis) -> Counter[str]:
    """The commands the server ran since its statistics were reset, by name (script calls and
    the commands the scripts made, each counted)."""
    stats = await client.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(s["calls"]) for name, s in stats.items()})


async def _measured(client: aioredis.Redis, call: Any) -> tuple[Any, Counter[str]]:
    await client.config_resetstat()
    result = await call
    return result, await _commands(client)


async def _put(storage: Storage, control: Control) -> Control:
    found = {c.key: c for c in await storage.list_controls(control.queue)}.get(control.key)
    return await storage.put_control(control, expected_version=found.version if found else 0)


@pytest_asyncio.fixture
async def raw(redis_url: str) -> Any:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.mark.asyncio
async def test_a_claim_of_a_queue_without_controls_reads_nothing_of_flow_control(
    storage: Storage, raw: aioredis.Redis
) -> None:
    queue = new_queue()
    await storage.enqueue_batch([new_task(queue, keys=["dep:x"]) for _ in range(3)])
    await storage.claim_due(new_queue(), 1, LEASE)  # warm: scripts loaded, connection open
    claimed, ran = await _measured(raw, storage.claim_due(queue, 10, LEASE))
    assert len(claimed) == 3
    # one EXISTS of the queue's controls and held sets, then the claim as before: the levels,
    # two range reads, per task an EXISTS and its writes, an EXISTS of the emptied priority's
    # sets; no control, lease or held set is read or written
    assert ran["exists"] == 1 + 3 + 1
    assert not {"hmget", "smembers", "zcount", "sadd"} & set(ran), ran
    assert sum(ran.values()) < 40, ran


@pytest.mark.asyncio
async def test_a_deep_paused_backlog_is_held_back_once_and_costs_later_claims_nothing(
    storage: Storage, raw: aioredis.Redis
) -> None:
    queue = new_queue()
    backlog = [new_task(queue, n, handler_ref=A) for n in range(2500)]
    for start in range(0, len(backlog), 500):
        await storage.enqueue_batch(backlog[start : start + 500])
    others = [new_task(queue) for _ in range(3)]
    await storage.enqueue_batch(others)
    await storage.put_control(
        Control(queue=queue, key=handler_key(A), paused=True), expected_version=0
    )

    # A claim moves at most 1000 held-back tasks aside, so the first claims after the pause
    # work through the backlog older than B's tasks before they reach them.
    taken: list[str] = []
    for _ in range(4):
        taken += [c.task.id for c in await storage.claim_due(queue, 10, LEASE)]
        if taken:
            break
    assert sorted(taken) == sorted(t.id for t in others)

    # From now on a claim does not look at the paused backlog at all.
    more = [new_task(queue) for _ in range(2)]
    await storage.enqueue_batch(more)
    claimed, ran = await _measured(raw, storage.claim_due(queue, 10, LEASE))
    assert sorted(c.task.id for c in claimed) == sorted(t.id for t in more)
    assert sum(ran.values()) < 80, ran
    assert await storage.claim_due(queue, 10, LEASE) == []
    assert await storage.wait_due(queue, 0.2) is False, "held-back tasks wake nobody"

    # Held-back tasks are PENDING to every reader.
    stats = await storage.stats(queue)
    assert (stats.pending, stats.in_flight) == (2500, 5)
    assert stats.oldest_pending_age is not None
    assert (await storage.get(backlog[0].id)).status == Status.PENDING
    listed, _ = await storage.list_tasks(queue, TaskFilter(status=Status.PENDING), Page(limit=3))
    assert [t.id for t in listed] == [t.id for t in backlog[:3]]
    assert await storage.cancel(queue, [backlog[-1].id]) == 1
    assert (await storage.stats(queue)).pending == 2499

    # Lifting the pause lets them back, oldest first, as many per claim as it asks for.
    await _put(storage, Control(queue=queue, key=handler_key(A)))
    first = await storage.claim_due(queue, 50, LEASE)
    assert [c.task.id for c in first] == [t.id for t in backlog[:50]]
    await storage.delete_control(queue, handler_key(A), expected_version=2)
    rest: list[str] = []
    while batch := await storage.claim_due(queue, 1000, LEASE):
        rest += [c.task.id for c in batch]
    assert rest == [t.id for t in backlog[50:-1]]
    assert not await raw.keys(f"*{{{queue}}}:held*")


@pytest.mark.asyncio
async def test_held_back_tasks_come_back_by_priority_then_due_time(storage: Storage) -> None:
    queue = new_queue()
    low = [new_task(queue, n, keys=["psp"], priority=-1) for n in range(3)]
    high = [new_task(queue, 10 + n, keys=["psp"], priority=5) for n in range(2)]
    await storage.enqueue_batch(low)
    await storage.enqueue_batch(high)
    await storage.put_control(Control(queue=queue, key="psp", concurrency=1), expected_version=0)
    order: list[str] = []
    for _ in range(len(low) + len(high)):
        (claim,) = await storage.claim_due(queue, 10, LEASE)  # one slot: the rest held back
        assert await storage.claim_due(queue, 10, LEASE) == []
        order.append(claim.task.id)
        await storage.complete(
            claim.task.id, claim.token, Attempt(number=1, outcome=Outcome.SUCCEEDED)
        )
    assert order == [t.id for t in high + low]


@pytest.mark.asyncio
async def test_a_lapsed_lease_held_back_stays_its_holders(storage: Storage) -> None:
    queue = new_queue()
    task = new_task(queue, keys=["dep:x"])
    await storage.enqueue(task)
    (claim,) = await storage.claim_due(queue, 1, timedelta(milliseconds=50))
    await storage.put_control(Control(queue=queue, key="dep:x", paused=True), expected_version=0)
    await asyncio.sleep(0.1)
    assert await storage.claim_due(queue, 10, LEASE) == []  # lapsed, but paused: held back
    assert (await storage.stats(queue)).in_flight == 1
    assert (await storage.get(task.id)).status == Status.IN_FLIGHT
    assert await storage.wait_due(queue, 0.2) is False
    # its holder may still extend it (back in the in-flight set, counted by the key again)...
    await storage.extend_lease(task.id, claim.token, LEASE)
    (control,) = await storage.list_controls(queue)
    assert control.in_use == 1
    # ...and resolve it
    await storage.complete(task.id, claim.token, Attempt(number=1, outcome=Outcome.SUCCEEDED))
    (control,) = await storage.list_controls(queue)
    assert control.in_use == 0
    assert (await storage.stats(queue)).succeeded == 1


@pytest.mark.asyncio
async def test_a_control_created_while_tasks_are_in_flight_counts_them(storage: Storage) -> None:
    queue = new_queue()
    await storage.enqueue_batch([new_task(queue, keys=["psp"]) for _ in range(5)])
    running = await storage.claim_due(queue, 3, LEASE)
    await storage.put_control(Control(queue=queue, key="psp", concurrency=4), expected_version=0)
    (control,) = await storage.list_controls(queue)
    assert control.in_use == 3
    assert len(await storage.claim_due(queue, 10, LEASE)) == 1
    await storage.cancel(queue, [running[0].task.id])
    assert len(await storage.claim_due(queue, 10, LEASE)) == 1


@pytest.mark.asyncio
async def test_the_queue_control_caps_a_claim_without_holding_tasks_back(
    storage: Storage, raw: aioredis.Redis, key_prefix: str
) -> None:
    queue = new_queue()
    await storage.enqueue_batch([new_task(queue) for _ in range(6)])
    await storage.put_control(
        Control(queue=queue, key=QUEUE_KEY, concurrency=2), expected_version=0
    )
    assert len(await storage.claim_due(queue, 10, LEASE)) == 2
    assert await storage.claim_due(queue, 10, LEASE) == []
    assert await raw.exists(f"{key_prefix}:{{{queue}}}:heldkeys") == 0
    assert await storage.wait_due(queue, 0.2) is False, "a full queue wakes nobody"
    await _put(storage, Control(queue=queue, key=QUEUE_KEY, gate=1))
    assert len(await storage.claim_due(queue, 10, LEASE)) == 1


@pytest.mark.asyncio
async def test_lifting_a_pause_wakes_the_waiters(storage: Storage) -> None:
    queue = new_queue()
    await storage.enqueue(new_task(queue))
    paused = await storage.put_control(
        Control(queue=queue, key=QUEUE_KEY, paused=True), expected_version=0
    )
    assert await storage.wait_due(queue, 0.2) is False, "a paused queue wakes nobody"
    waiter = asyncio.create_task(storage.wait_due(queue, 60.0))
    await asyncio.sleep(0.2)
    assert not waiter.done()
    await storage.put_control(Control(queue=queue, key=QUEUE_KEY), expected_version=paused.version)
    assert await asyncio.wait_for(waiter, 30) is True
    assert len(await storage.claim_due(queue, 10, LEASE)) == 1


@pytest.mark.asyncio
async def test_a_rate_limited_key_wakes_its_waiters_when_a_token_comes(storage: Storage) -> None:
    queue = new_queue()
    await storage.enqueue_batch([new_task(queue, keys=["api"]) for _ in range(3)])
    await storage.put_control(
        Control(queue=queue, key="api", rate=4, per=1.0, burst=1), expected_version=0
    )
    assert len(await storage.claim_due(queue, 10, LEASE)) == 1
    assert await storage.claim_due(queue, 10, LEASE) == []
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await storage.wait_due(queue, 30.0) is True  # the next token, in about 0.25 s
    assert loop.time() - started < 10
    (claim,) = await storage.claim_due(queue, 10, LEASE)
    assert claim.task.keys == ["api"]


@pytest.mark.asyncio
async def test_the_registry_and_the_counts_have_slots_of_their_own(
    storage: Storage, raw: aioredis.Redis, key_prefix: str
) -> None:
    await storage.heartbeat_worker(WorkerInfo(id="w-1", host="h"))
    await storage.add_counts(
        [
            Counts(
                queue="q1",
                minute=(await storage.now()).replace(second=0, microsecond=0),
                succeeded=1,
            )
        ]
    )
    await storage.put_control(Control(queue="q1", key="k", paused=True), expected_version=0)
    keys = {k.decode() async for k in raw.scan_iter(match=f"{key_prefix}:*")}
    workers = {k for k in keys if k.startswith(f"{key_prefix}:{{_workers}}:")}
    counts = {k for k in keys if k.startswith(f"{key_prefix}:{{_counts}}:")}
    queue = {k for k in keys if k.startswith(f"{key_prefix}:{{q1}}:")}
    assert workers == {f"{key_prefix}:{{_workers}}:{n}" for n in ("info", "started", "seen")}
    assert len(counts) == 3
    assert queue == {f"{key_prefix}:{{q1}}:{n}" for n in ("controls", "ctl:k")}
    assert keys - workers - counts - queue == {f"{key_prefix}:controlled", f"{key_prefix}:layout"}
