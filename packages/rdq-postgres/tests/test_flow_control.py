"""How the claim honours control records on PostgreSQL (the kit checks the promises; these
check how): a queue no control restricts is claimed by the plain statement (``claim.sql``),
one that a control restricts by ``claim_controlled.sql``; the controlled claim leases
exactly as the plain one; held-back tasks, however many, never stop it; a task held back by
one key takes no room of its others."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from rdq.spi import (
    QUEUE_KEY,
    Control,
    Envelope,
    handler_key,
)
from rdq_compliance._support import clock_passes
from rdq_postgres import PostgresStorage

ClaimPlan = Callable[[PostgresStorage, str, int], Awaitable[list[dict[str, Any]]]]
"""The fixture ``claim_plan`` (conftest.py)."""

LEASE = timedelta(minutes=10)
SHORT = timedelta(milliseconds=300)


@pytest.mark.asyncio
async def test_a_queue_without_restricting_controls_is_claimed_by_the_plain_statement(
    storage: PostgresStorage, claim_plan: ClaimPlan
) -> None:
    """claim.sql checks the queue once, before its scan (a one-time filter); it refuses a
    queue that a control restricts (RQ423), which the store then claims with
    claim_controlled.sql until that says no control restricts it any more."""
    await storage.enqueue_batch(
        [Envelope(id=f"t{i}", queue="q", handler_ref="a") for i in range(6)]
    )
    checks = [
        n["One-Time Filter"] for n in await claim_plan(storage, "q", 10) if "One-Time Filter" in n
    ]
    assert [check for check in checks if ".unrestricted($1)" in check] == checks != [], checks
    # a control that restricts nothing (a breaker's state, say) keeps the plain claim
    await storage.put_control(
        Control(queue="q", key="dep:x", state={"breaker": "closed"}), expected_version=0
    )
    await claim_plan(storage, "q", 10)
    # another queue's pause does not concern this one
    await storage.put_control(
        Control(queue="other", key=QUEUE_KEY, paused=True), expected_version=0
    )
    await claim_plan(storage, "q", 10)
    assert len(await storage.claim_due("q", 1, LEASE)) == 1
    assert storage._controlled == set()

    pause = await storage.put_control(
        Control(queue="q", key="dep:y", paused=True), expected_version=0
    )
    with pytest.raises(asyncpg.PostgresError) as refused:
        await claim_plan(storage, "q", 10)
    assert refused.value.sqlstate == "RQ423"
    assert len(await storage.claim_due("q", 2, LEASE)) == 2
    assert storage._controlled == {"q"}, "the store remembers the queue has controls"
    assert len(await storage.claim_due("q", 1, LEASE)) == 1
    await storage.delete_control("q", "dep:y", expected_version=pause.version)
    assert len(await storage.claim_due("q", 1, LEASE)) == 1, "claim_controlled.sql, one last time"
    assert storage._controlled == set()
    assert len(await storage.claim_due("q", 5, LEASE)) == 1
    assert await storage.claim_due("q", 5, LEASE) == []


@pytest.mark.asyncio
async def test_the_controlled_claim_leases_and_reclaims_as_the_plain_one(
    storage: PostgresStorage,
) -> None:
    """The same lease, claim holder and LEASE_EXPIRED record on both paths."""
    results = {}
    for queue, controlled in (("plain", False), ("held", True)):
        await storage.enqueue(Envelope(id=f"{queue}-1", queue=queue, handler_ref="a", priority=2))
        if controlled:
            await storage.put_control(
                Control(queue=queue, key="dep:elsewhere", paused=True), expected_version=0
            )
        (first,) = await storage.claim_due(queue, 5, SHORT, worker_id="w-1")
        assert first.task.lease_expires_at is not None
        await clock_passes(storage, first.task.lease_expires_at)
        (again,) = await storage.claim_due(queue, 5, LEASE, worker_id="w-2")
        task = again.task
        assert again.token != first.token
        assert task.lease_expires_at is not None and task.claimed_at is not None
        assert task.lease_expires_at - task.claimed_at == LEASE
        (record,) = task.attempts
        results[queue] = (
            task.status,
            task.attempt_count,
            task.claimed_by,
            record.number,
            record.outcome,
            record.error_type,
            record.worker_id,
            record.started_at == first.task.claimed_at,
            record.finished_at == task.claimed_at,
            (record.error_message or "").startswith("lease expired at "),
        )
    assert results["plain"] == results["held"]
    assert results["held"][:3] == ("IN_FLIGHT", 1, "w-2")


@pytest.mark.asyncio
async def test_a_deep_paused_backlog_never_stops_the_claim_nor_is_locked_by_it(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """Thousands of paused tasks ahead of the others: every claim takes the others, in
    order, and leaves the paused ones unlocked (another claimant could take them at once)."""
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute(
            f'INSERT INTO "{schema}".task (id, queue, handler_ref, status, next_attempt_at, keys)'
            " SELECT 'a' || g, 'q', 'A', 'PENDING', now() - interval '1 hour',"
            " CASE WHEN g % 2 = 0 THEN '{dep:x}'::text[] ELSE '{}' END"
            " FROM generate_series(1, 5000) AS g"
        )
    finally:
        await conn.close()
    await storage.enqueue_batch(
        [Envelope(id=f"b{i}", queue="q", handler_ref="B", priority=0) for i in range(25)]
    )
    await storage.put_control(
        Control(queue="q", key=handler_key("A"), paused=True), expected_version=0
    )
    await storage.put_control(Control(queue="q", key=QUEUE_KEY, gate=100), expected_version=0)
    got: list[str] = []
    while batch := await storage.claim_due("q", 10, LEASE):
        assert all(c.task.handler_ref == "B" for c in batch)
        got += [c.task.id for c in batch]
    assert sorted(got) == sorted(f"b{i}" for i in range(25))
    (gate,) = [c for c in await storage.list_controls("q") if c.key == QUEUE_KEY]
    assert gate.gate == 75
    conn = await asyncpg.connect(postgres_url)
    try:
        locked = await conn.fetchval(
            f'SELECT count(*) FROM (SELECT FROM "{schema}".task WHERE handler_ref = $1'
            " FOR UPDATE SKIP LOCKED) AS s",
            "A",
        )
    finally:
        await conn.close()
    assert locked == 5000


@pytest.mark.asyncio
async def test_a_task_held_back_by_one_key_takes_no_room_of_its_others(
    storage: PostgresStorage,
) -> None:
    """Room is taken only by tasks claimed: t1 (keys a, b) waits for b, so t2 (key a) gets
    a's one slot — in claim order, the rule of rdq.spi.ClaimGate."""
    for n, keys in enumerate((["b"], ["a", "b"], ["a"], ["c"])):
        await storage.enqueue(Envelope(id=f"t{n}", queue="q", handler_ref="h", keys=keys))
        await asyncio.sleep(0.002)  # distinct due times: the claim order is t0, t1, t2, t3
    await storage.put_control(Control(queue="q", key="a", gate=1), expected_version=0)
    await storage.put_control(Control(queue="q", key="b", concurrency=1), expected_version=0)
    claimed = [c.task.id for c in await storage.claim_due("q", 10, LEASE)]
    assert claimed == ["t0", "t2", "t3"]
    by_key = {c.key: c for c in await storage.list_controls("q")}
    assert (by_key["a"].gate, by_key["a"].in_use, by_key["b"].in_use) == (0, 1, 1)


@pytest.mark.asyncio
async def test_the_controlled_claim_keeps_the_claim_order(storage: PostgresStorage) -> None:
    await storage.enqueue_batch(
        [
            Envelope(id=f"p{p}-{i}", queue="q", handler_ref="h", priority=p, keys=["k"])
            for p in (-1, 5, 0)
            for i in range(3)
        ]
    )
    await storage.put_control(Control(queue="q", key="k", concurrency=7), expected_version=0)
    claimed = [c.task.id for c in await storage.claim_due("q", 10, LEASE)]
    assert [i.rsplit("-", 1)[0] for i in claimed] == ["p5"] * 3 + ["p0"] * 3 + ["p-1"]


@pytest.mark.asyncio
async def test_a_gate_and_a_rate_are_taken_exactly_by_racing_stores(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """Eight stores (eight pools) claim at once: a gate of 5 lets exactly 5 through, a full
    bucket of 4 exactly 4."""
    await storage.enqueue_batch(
        [Envelope(id=f"g{i}", queue="gated", handler_ref="h") for i in range(40)]
        + [Envelope(id=f"r{i}", queue="rated", handler_ref="h", keys=["api"]) for i in range(40)]
    )
    await storage.put_control(Control(queue="gated", key="*", gate=5), expected_version=0)
    await storage.put_control(
        Control(queue="rated", key="api", rate=1, per=3600.0, burst=4), expected_version=0
    )
    stores = [PostgresStorage.from_url(postgres_url, schema=schema) for _ in range(8)]
    try:
        await asyncio.gather(*(s.connect() for s in stores))
        for queue, expected in (("gated", 5), ("rated", 4)):
            results = await asyncio.gather(*(s.claim_due(queue, 3, LEASE) for s in stores))
            assert sum(len(r) for r in results) == expected, queue
    finally:
        await asyncio.gather(*(s.aclose() for s in stores))
