"""Focused tests of the Mongo store's own mechanics (the kit checks the contract)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rdq.errors import IDConflict, NotFound, StaleClaim
from rdq.spi import Attempt, Claimed, Completion, Envelope, Outcome, Page, Selector, Status
from rdq_mongo import MongoStorage


def _task(task_id: str, queue: str = "q") -> Envelope:
    return Envelope(id=task_id, queue=queue, handler_ref="app:handler", payload={"n": 1})


@pytest.mark.asyncio
async def test_enqueue_claim_complete(store: MongoStorage) -> None:
    assert await store.enqueue(_task("a"))
    assert not await store.enqueue(_task("a"))
    with pytest.raises(IDConflict):
        await store.enqueue(_task("a", queue="other"))
    claimed = await store.claim_due("q", 10, timedelta(seconds=30))
    assert [c.task.id for c in claimed] == ["a"]
    assert claimed[0].task.status == Status.IN_FLIGHT
    attempt = Attempt(number=1, outcome=Outcome.SUCCEEDED, finished_at=datetime.now(UTC))
    with pytest.raises(StaleClaim):
        await store.complete("a", "nope", attempt)
    with pytest.raises(NotFound):
        await store.complete("zz", "nope", attempt)
    await store.complete("a", claimed[0].token, attempt)
    got = await store.get("a")
    assert got.status == Status.SUCCEEDED
    assert got.attempts == [attempt]
    assert got.completed_at is not None


@pytest.mark.asyncio
async def test_lease_expiry_reclaims_with_record(store: MongoStorage) -> None:
    await store.enqueue(_task("b"))
    first = await store.claim_due("q", 1, timedelta(milliseconds=1))
    assert first
    second: list[Claimed] = []
    for _ in range(200):
        second = await store.claim_due("q", 1, timedelta(seconds=30))
        if second:
            break
    assert second and second[0].token != first[0].token
    task = second[0].task
    assert task.attempt_count == 1
    assert task.attempts[0].outcome == Outcome.LEASE_EXPIRED


@pytest.mark.asyncio
async def test_dlq_and_redrive(store: MongoStorage) -> None:
    for i in range(5):
        await store.enqueue(_task(f"d{i}"))
    for c in await store.claim_due("q", 10, timedelta(seconds=30)):
        await store.dead_letter(
            c.task.id, c.token, Attempt(number=1, outcome=Outcome.PERMANENT, error_type="Boom")
        )
    page1, cursor = await store.dlq_list("q", None, Page(limit=3))
    assert len(page1) == 3 and cursor is not None
    page2, cursor2 = await store.dlq_list("q", None, Page(limit=3, cursor=cursor))
    assert len(page2) == 2 and cursor2 is None
    assert await store.redrive("q", Selector.by_ids("d0", "d1")) == 2
    d0 = await store.get("d0")
    assert d0.status == Status.PENDING and d0.redrive_count == 1 and len(d0.attempts) == 1
    stats = await store.stats("q")
    assert (stats.pending, stats.dlq_depth) == (2, 3)


@pytest.mark.asyncio
async def test_complete_many_reports_each_completion(store: MongoStorage) -> None:
    assert store.capabilities().batch_complete
    for i in range(3):
        await store.enqueue(_task(f"m{i}"))
    claims = {c.task.id: c for c in await store.claim_due("q", 10, timedelta(minutes=5))}
    done = Attempt(number=1, outcome=Outcome.SUCCEEDED)
    results = await store.complete_many(
        [
            Completion("m0", claims["m0"].token, done),
            Completion("m1", "not-the-token", done),
            Completion("missing", "whatever", done),
            Completion("m2", claims["m2"].token, done),
            Completion("m0", claims["m0"].token, done),  # the same claim twice: once only
        ]
    )
    assert results[0] is None and results[3] is None
    assert isinstance(results[1], StaleClaim) and isinstance(results[4], StaleClaim)
    assert isinstance(results[2], NotFound)
    assert (await store.get("m0")).status == Status.SUCCEEDED
    assert len((await store.get("m0")).attempts) == 1
    assert (await store.get("m1")).status == Status.IN_FLIGHT
    assert await store.complete_many([]) == []
    ok = await store.complete_many([Completion("m1", claims["m1"].token, done)])
    assert ok == [None]
