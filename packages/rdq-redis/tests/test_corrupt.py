"""Task hashes that do not decode (edited by hand, written by a buggy producer) never make an
operation raise and never strand their neighbours: the reproduction of a poison row on Redis
(``HSET <prefix>:{q}:task:a body '{not json'`` beside 20 intact tasks, claims of 10), and
each kind of bad field value."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from rdq.spi import (
    Attempt,
    Envelope,
    Outcome,
    Page,
    Selector,
    Status,
    Storage,
    TaskFilter,
)

LEASE = timedelta(minutes=5)
PATIENCE = 60.0


def _corrupt_attempt(number: int = 1) -> Attempt:
    return Attempt(number=number, outcome=Outcome.PERMANENT, error_type="rdq.CorruptTask")


async def _tasks(storage: Storage, queue: str, count: int) -> list[str]:
    """``count`` intact tasks, enqueued one after another (so they are claimed in order)."""
    ids = []
    for n in range(count):
        task = Envelope(id=f"{queue}-{n:02d}", queue=queue, handler_ref="app:ok", payload={"n": n})
        await storage.enqueue(task)
        ids.append(task.id)
    return ids


@pytest_asyncio.fixture
async def raw(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.mark.asyncio
async def test_a_poison_task_beside_20_others_strands_no_claim_batch(
    storage: Storage, raw: aioredis.Redis, key_prefix: str
) -> None:
    queue = f"poison-{uuid.uuid4().hex[:8]}"
    poison = f"{queue}-a"
    await storage.enqueue(Envelope(id=poison, queue=queue, handler_ref="app:ok"))
    intact = await _tasks(storage, queue, 20)
    key = f"{key_prefix}:{{{queue}}}:task:{poison}"
    await raw.hset(key, "body", "{not json")

    done: list[str] = []
    for expected in (10, 10, 1):
        batch = await storage.claim_due(queue, 10, LEASE, worker_id="w1")
        assert len(batch) == expected
        for claim in batch:
            task = claim.task
            if task.id == poison:
                assert task.corrupt is not None and "{not json" in task.corrupt
                assert (task.status, task.claimed_by) == (Status.IN_FLIGHT, "w1")
                await storage.dead_letter(task.id, claim.token, _corrupt_attempt())
            else:
                assert task.corrupt is None
                ok = Attempt(number=1, outcome=Outcome.SUCCEEDED)
                await storage.complete(task.id, claim.token, ok)
                done.append(task.id)
    assert sorted(done) == intact
    assert await storage.claim_due(queue, 10, LEASE) == []

    stats = await storage.stats(queue)
    assert (stats.succeeded, stats.dlq_depth, stats.pending, stats.in_flight) == (20, 1, 0, 0)
    (dead,), _ = await storage.dlq_list(queue, None, Page(include_attempts=True))
    assert dead.id == poison and dead.status is Status.DEAD
    assert dead.corrupt is not None and "{not json" in dead.corrupt
    assert dead.attempts[-1].error_type == "rdq.CorruptTask"
    assert (await storage.dlq_groups(queue))[0].error_type == "rdq.CorruptTask"
    assert await raw.hget(key, "body") == b"{not json"  # the raw body is kept for inspection
    assert (await storage.get(poison)).corrupt == dead.corrupt


# case: (hash field, value written or None to delete the field, what `corrupt` must show)
# A bad status is the store's own field: the claim writes it anew (the sets, not the field,
# say where a task is), so the task is intact from then on.
REPAIRED_BY_A_CLAIM = {"status-missing", "status-unknown"}
BAD_FIELDS: dict[str, tuple[str, bytes | None, str]] = {
    "body-missing": ("body", None, "body is missing"),
    "body-not-an-object": ("body", b"[1, 2]", "[1, 2]"),
    "headers-wrong-type": ("body", b'{"handler_ref": "app:ok", "headers": [7, 8]}', "[7, 8]"),
    "retry-wrong-type": ("body", b'{"handler_ref": "h", "retry": {"base": "soon"}}', "soon"),
    "attempt-count-text": ("attempt_count", b"lots", "lots"),
    "priority-text": ("priority", b"high", "high"),
    "priority-out-of-range": ("priority", b"99", "99"),
    "created-at-text": ("created_at", b"yesterday", "yesterday"),
    "attempts-not-an-array": ("attempts", b'{"x": 1}', '{"x": 1}'),
    "attempts-not-json": ("attempts", b"[{", "[{"),
    "payload-too-deep": (
        "body",
        b'{"handler_ref": "app:ok", "payload": ' + b"[" * 3000 + b"]" * 3000 + b"}",
        "nests deeper than the decoder goes",
    ),
    "created-at-past-year-9999": ("created_at", str(10**18).encode(), str(10**18)),
    "next-attempt-at-before-year-1": ("next_attempt_at", str(-(10**18)).encode(), "next_att"),
    "status-missing": ("status", None, "status is missing"),
    "status-unknown": ("status", b"BOGUS", "BOGUS"),
}


@pytest.mark.parametrize("case", sorted(BAD_FIELDS))
@pytest.mark.asyncio
async def test_each_kind_of_bad_field_is_claimed_listed_and_dead_lettered(
    case: str, storage: Storage, raw: aioredis.Redis, key_prefix: str
) -> None:
    field, value, shown = BAD_FIELDS[case]
    queue = f"bad-{uuid.uuid4().hex[:8]}"
    ids = await _tasks(storage, queue, 5)
    poison = ids[2]
    key = f"{key_prefix}:{{{queue}}}:task:{poison}"
    if value is None:
        await raw.hdel(key, field)
    else:
        await raw.hset(key, field, value)

    got = await storage.get(poison)
    assert got.corrupt is not None, case
    assert shown in got.corrupt, got.corrupt
    assert (got.id, got.queue, got.status) == (poison, queue, Status.PENDING)
    listed, _ = await storage.list_tasks(queue, TaskFilter(status=Status.PENDING), Page())
    assert [t.id for t in listed] == ids
    assert [t.id for t in listed if t.corrupt] == [poison]

    claimed = await storage.claim_due(queue, 10, LEASE)
    assert sorted(c.task.id for c in claimed) == ids
    for claim in claimed:
        if claim.task.id == poison:
            assert (claim.task.corrupt is None) == (case in REPAIRED_BY_A_CLAIM)
            await storage.dead_letter(poison, claim.token, _corrupt_attempt())
        else:
            assert claim.task.corrupt is None
            ok = Attempt(number=1, outcome=Outcome.SUCCEEDED)
            await storage.complete(claim.task.id, claim.token, ok)
    (dead,), _ = await storage.dlq_list(queue, None, Page(include_attempts=True))
    assert dead.id == poison and dead.status is Status.DEAD
    if case not in REPAIRED_BY_A_CLAIM:
        # the bad value is still shown, whether it is still stored or kept as raw.<field>
        assert dead.corrupt is not None and shown in dead.corrupt, dead.corrupt
        assert "b'raw." not in dead.corrupt  # names the kept field as text, not a bytes repr

    assert await storage.redrive(queue, Selector.by_ids(poison)) == 1
    assert await storage.cancel(queue, [poison]) == 1
    assert await storage.purge(queue, Selector.by_ids(poison)) == 1
    assert (await storage.stats(queue)).succeeded == 4


@pytest.mark.asyncio
async def test_a_lost_lease_of_a_task_with_bad_counters_is_reclaimed_and_the_values_kept(
    storage: Storage, raw: aioredis.Redis, key_prefix: str
) -> None:
    queue = f"lapse-{uuid.uuid4().hex[:8]}"
    (task_id,) = await _tasks(storage, queue, 1)
    key = f"{key_prefix}:{{{queue}}}:task:{task_id}"
    await raw.hset(key, mapping={"attempt_count": "lots", "attempts": '{"x": 1}'})
    (first,) = await storage.claim_due(queue, 1, timedelta(milliseconds=100), worker_id="w-1")

    loop = asyncio.get_running_loop()
    deadline = loop.time() + PATIENCE
    while not (again := await storage.claim_due(queue, 1, LEASE, worker_id="w-2")):
        assert loop.time() < deadline, "the lapsed lease was never reclaimed"
        await asyncio.sleep(0.05)
    (claim,) = again
    assert claim.token != first.token
    lapsed = claim.task.attempts[-1]
    assert (lapsed.outcome, lapsed.worker_id, lapsed.number) == (Outcome.LEASE_EXPIRED, "w-1", 1)
    assert claim.task.attempt_count == 1
    assert claim.task.corrupt is not None and "lots" in claim.task.corrupt
    assert await raw.hget(key, "raw.attempt_count") == b"lots"
    assert await raw.hget(key, "raw.attempts") == b'{"x": 1}'

    await storage.dead_letter(task_id, claim.token, _corrupt_attempt(2))
    assert await storage.redrive(queue, Selector.by_ids(task_id)) == 1
    redriven = await storage.get(task_id)
    assert redriven.corrupt is None  # a redrive starts afresh: the kept values are dropped
    assert [a.outcome for a in redriven.attempts] == [Outcome.LEASE_EXPIRED, Outcome.PERMANENT]


# Attempt records that look like a JSON array: pages without attempts do not read them (so do
# not flag them); reads with attempts and claims do.
BAD_ATTEMPTS = {
    "too-deep": b"[" * 3000 + b"]" * 3000,
    "time-past-year-9999": b'[{"number": 1, "outcome": "FAILED", "finished_at": %d}]' % 10**18,
}


@pytest.mark.parametrize("case", sorted(BAD_ATTEMPTS))
@pytest.mark.asyncio
async def test_attempt_records_too_deep_or_past_year_9999_are_read_as_corrupt_among_others(
    case: str, storage: Storage, raw: aioredis.Redis, key_prefix: str
) -> None:
    queue = f"bad-{uuid.uuid4().hex[:8]}"
    ids = await _tasks(storage, queue, 5)
    poison = ids[2]
    await raw.hset(f"{key_prefix}:{{{queue}}}:task:{poison}", "attempts", BAD_ATTEMPTS[case])
    got = await storage.get(poison)
    assert got.corrupt is not None and "attempts did not decode" in got.corrupt
    claimed = await storage.claim_due(queue, 10, LEASE)
    assert sorted(c.task.id for c in claimed) == ids
    assert [c.task.id for c in claimed if c.task.corrupt] == [poison]
