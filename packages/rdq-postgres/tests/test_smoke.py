from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from rdq.errors import IDConflict, NotFound, StaleClaim
from rdq.spi import Attempt, Claimed, DLQFilter, Envelope, Outcome, Page, Selector, Status
from rdq_postgres import PostgresStorage


def _task(task_id: str, queue: str = "q", **kw: object) -> Envelope:
    return Envelope(id=task_id, queue=queue, handler_ref="mod:fn", **kw)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_round_trip(storage: PostgresStorage) -> None:
    t = _task("a", payload={"x": [1, 2.5, "\x00z"]}, headers={"h": "v"}, extra={"future": {"k": 1}})
    assert await storage.enqueue(t) is True
    assert await storage.enqueue(t) is False
    with pytest.raises(IDConflict):
        await storage.enqueue(_task("a", queue="other"))
    got = await storage.get("a")
    assert got.payload == {"x": [1, 2.5, "\x00z"]}
    assert got.extra == {"future": {"k": 1}}
    claimed = await storage.claim_due("q", 10, timedelta(seconds=30))
    assert [c.task.id for c in claimed] == ["a"]
    c = claimed[0]
    assert c.task.status == Status.IN_FLIGHT
    with pytest.raises(StaleClaim):
        await storage.complete("a", "nope", Attempt(number=1, outcome=Outcome.SUCCEEDED))
    with pytest.raises(NotFound):
        await storage.complete("zz", "nope", Attempt(number=1, outcome=Outcome.SUCCEEDED))
    await storage.extend_lease("a", c.token, timedelta(seconds=60))
    await storage.dead_letter(
        "a", c.token, Attempt(number=1, outcome=Outcome.FAILED, error_type="Boom\x00")
    )
    tasks, cursor = await storage.dlq_list("q", DLQFilter(error_type="Boom\x00"), Page())
    assert [x.id for x in tasks] == ["a"] and cursor is None
    stats = await storage.stats("q")
    assert stats.dlq_depth == 1
    assert await storage.redrive("q", Selector.by_filter()) == 1
    assert len(await storage.claim_due("q", 10, timedelta(milliseconds=1))) == 1
    again: list[Claimed] = []
    while not again:  # the 1 ms lease lapses: the task is due again, and reclaimed
        again = await storage.claim_due("q", 10, timedelta(seconds=10))
        await asyncio.sleep(0.001)
    assert [x.task.attempts[-1].outcome for x in again] == [Outcome.LEASE_EXPIRED]
    await storage.complete("a", again[0].token, Attempt(number=3, outcome=Outcome.SUCCEEDED))
    got = await storage.get("a")
    assert got.status == Status.SUCCEEDED and got.attempt_count == 2
    assert await storage.purge_succeeded("q", datetime.now(UTC) + timedelta(1)) == 1


@pytest.mark.asyncio
async def test_batch(storage: PostgresStorage) -> None:
    assert await storage.enqueue_batch([_task("a"), _task("b"), _task("a")]) == [True, True, False]
    with pytest.raises(IDConflict):
        await storage.enqueue_batch([_task("c"), _task("a", queue="z")])
    with pytest.raises(NotFound):
        await storage.get("c")


@pytest.mark.asyncio
async def test_wait_due(storage: PostgresStorage) -> None:
    assert await storage.wait_due("q", 0.2) is False
    await storage.enqueue(_task("a"), delay=timedelta(seconds=0.3))
    assert await storage.wait_due("q", 10) is True
