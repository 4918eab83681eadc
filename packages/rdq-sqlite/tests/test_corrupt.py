"""Rows whose JSON columns were spoiled by hand (or by a buggy writer in another language)
never make an operation raise, never block other tasks, and say what is wrong."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from rdq.spi import (
    Attempt,
    Claimed,
    DLQFilter,
    Envelope,
    Outcome,
    Page,
    Selector,
    Status,
    TaskFilter,
)
from rdq_sqlite import SqliteStorage

LEASE = timedelta(seconds=30)


def spoil(database: Path, task_id: str, column: str, value: str | int) -> None:
    conn = sqlite3.connect(database, isolation_level=None)
    try:
        conn.execute(f"UPDATE task SET {column} = ? WHERE id = ?", (value, task_id))
    finally:
        conn.close()


BAD_VALUES = [
    ("payload", "{not json"),
    ("headers", "[1, 2]"),
    ("headers", '{"a": 1}'),
    ("attempts", '{"x": 1}'),
    ("attempts", '[{"number": "one"}]'),
    ("retry", '{"max_attempts": "lots"}'),
    ("extra", "[1, 2]"),
]


_DEEP = "[" * 3000 + "]" * 3000  # deeper than any JSON decoder recurses
TOO_DEEP = [
    ("payload", _DEEP),
    ("headers", '{"h": ' + _DEEP + "}"),
    ("attempts", "[" + _DEEP + "]"),
    ("retry", '{"max_attempts": ' + _DEEP + "}"),
    ("extra", '{"x_new": ' + _DEEP + "}"),
]
FAR_TIMES = [  # microseconds since the epoch outside the years 1-9999
    ("created_at", 10**18),
    ("next_attempt_at", -(10**18)),
    ("completed_at", 2**63 - 1),
]


@pytest.mark.parametrize(("column", "value"), BAD_VALUES)
@pytest.mark.asyncio
async def test_get_returns_a_spoiled_task_with_corrupt_naming_the_field(
    store: SqliteStorage, database: Path, column: str, value: str
) -> None:
    await store.enqueue(Envelope(id="bad", queue="q", handler_ref="m:f", payload={"n": 1}))
    spoil(database, "bad", column, value)
    task = await store.get("bad")
    assert task.corrupt is not None
    assert task.corrupt.startswith(f"{column}:")
    assert repr(value) in task.corrupt
    assert (task.id, task.queue, task.status) == ("bad", "q", Status.PENDING)
    assert task.handler_ref == "m:f"
    if column != "payload":
        assert task.payload == {"n": 1}  # what decodes is filled in


@pytest.mark.asyncio
async def test_a_claim_takes_a_spoiled_task_with_the_others_and_never_raises(
    store: SqliteStorage, database: Path
) -> None:
    for n in range(5):
        await store.enqueue(Envelope(id=f"t{n}", queue="q", handler_ref="m:f"))
    spoil(database, "t2", "payload", "{oops")
    claims = await store.claim_due("q", 10, LEASE, worker_id="w1")
    assert [c.task.id for c in claims] == ["t0", "t1", "t2", "t3", "t4"]
    assert [c.task.corrupt is not None for c in claims] == [False, False, True, False, False]
    spoiled = claims[2]
    assert spoiled.task.status == Status.IN_FLIGHT
    assert spoiled.task.claimed_by == "w1"


@pytest.mark.asyncio
async def test_a_spoiled_history_is_kept_as_stored_while_the_task_is_dead_lettered(
    store: SqliteStorage, database: Path
) -> None:
    await store.enqueue(Envelope(id="bad", queue="q", handler_ref="m:f"))
    spoil(database, "bad", "attempts", "{broken")
    (claim,) = await store.claim_due("q", 1, LEASE)
    attempt = Attempt(number=1, outcome=Outcome.PERMANENT, error_type="rdq.CorruptTask")
    await store.dead_letter("bad", claim.token, attempt)
    task = await store.get("bad")
    assert task.status == Status.DEAD
    assert task.attempt_count == 1
    assert task.corrupt is not None and "'{broken'" in task.corrupt
    # the DLQ still finds it by the error that dead-lettered it, and groups it
    found, _ = await store.dlq_list("q", DLQFilter(error_type="rdq.CorruptTask"), Page())
    assert [t.id for t in found] == ["bad"]
    (group,) = await store.dlq_groups("q")
    assert (group.error_type, group.count) == ("rdq.CorruptTask", 1)
    assert await store.purge("q", Selector.by_ids("bad")) == 1


@pytest.mark.asyncio
async def test_a_lapsed_lease_on_a_spoiled_history_is_reclaimed_and_counted(
    store: SqliteStorage, database: Path
) -> None:
    await store.enqueue(Envelope(id="bad", queue="q", handler_ref="m:f"))
    spoil(database, "bad", "attempts", "null")
    await store.claim_due("q", 1, timedelta(milliseconds=1))
    reclaimed = await _claim_eventually(store)
    assert reclaimed.task.attempt_count == 1
    assert reclaimed.task.corrupt is not None


async def _claim_eventually(store: SqliteStorage) -> Claimed:
    """The next claim of queue ``q``, once its lease (1 ms, by the store's clock) lapsed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while not (claims := await store.claim_due("q", 1, LEASE)):
        assert loop.time() < deadline, "the lapsed lease was never reclaimed"
        await asyncio.sleep(0.01)
    return claims[0]


@pytest.mark.asyncio
async def test_listing_cancelling_and_stats_work_beside_a_spoiled_task(
    store: SqliteStorage, database: Path
) -> None:
    await store.enqueue(Envelope(id="good", queue="q", handler_ref="m:f"))
    await store.enqueue(Envelope(id="bad", queue="q", handler_ref="m:f"))
    spoil(database, "bad", "headers", "not json at all")
    tasks, _ = await store.list_tasks("q", TaskFilter(status=Status.PENDING), Page())
    assert {t.id: t.corrupt is not None for t in tasks} == {"good": False, "bad": True}
    assert (await store.stats("q")).pending == 2
    assert await store.cancel("q", ["bad"]) == 1
    cancelled, _ = await store.list_tasks("q", TaskFilter(status=Status.CANCELLED), Page())
    assert [t.id for t in cancelled] == ["bad"]
    assert await store.purge("q", Selector.by_ids("bad")) == 1


@pytest.mark.parametrize(("column", "value"), [*TOO_DEEP, *FAR_TIMES])
@pytest.mark.asyncio
async def test_json_too_deep_or_a_time_past_year_9999_is_claimed_as_corrupt_with_the_others(
    store: SqliteStorage, database: Path, column: str, value: str | int
) -> None:
    """Neither the decoder's RecursionError nor a time no ``datetime`` holds escapes a read:
    the claim hands out its whole batch, the spoiled task marked corrupt."""
    for n in range(5):
        await store.enqueue(Envelope(id=f"t{n}", queue="q", handler_ref="m:f", payload={"n": n}))
    spoil(database, "t2", column, value)
    claims = {c.task.id: c for c in await store.claim_due("q", 10, LEASE, worker_id="w1")}
    assert set(claims) == {"t0", "t1", "t2", "t3", "t4"}
    assert [t for t, c in sorted(claims.items()) if c.task.corrupt is not None] == ["t2"]
    spoiled = claims["t2"].task
    assert spoiled.corrupt is not None and spoiled.corrupt.startswith(f"{column}:")
    assert len(spoiled.corrupt) < 2000, "a long stored value is shown cut"
    assert (spoiled.status, spoiled.claimed_by) == (Status.IN_FLIGHT, "w1")
    failure = Attempt(number=1, outcome=Outcome.PERMANENT, error_type="rdq.CorruptTask")
    await store.dead_letter("t2", claims["t2"].token, failure)
    assert (await store.get("t2")).corrupt is not None
    for include in (False, True):
        dead, _ = await store.dlq_list("q", None, Page(include_attempts=include))
        assert [t.id for t in dead] == ["t2"]
        # a page without attempts does not read them, so it cannot see bad ones
        assert dead[0].corrupt is not None or (column == "attempts" and not include)
    assert [g.count for g in await store.dlq_groups("q")] == [1]
