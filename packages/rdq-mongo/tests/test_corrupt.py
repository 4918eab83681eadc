"""Documents whose fields do not decode (edited by hand, written by a buggy producer in
another language) never make an operation raise and never strand their claim batch."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from bson.datetime_ms import DatetimeMS

from rdq.spi import Attempt, Envelope, Outcome, Page, Selector, Status, TaskFilter
from rdq_mongo import MongoStorage

LONG = timedelta(minutes=10)
CorruptWriter = Callable[..., Awaitable[None]]

_BODY = '{"payload": {"n": 1}, "format_version": 1, '
CORRUPTIONS: dict[str, dict[str, Any]] = {
    "body-not-json": {"body": "{not json"},
    "body-not-an-object": {"body": "[1, 2]"},
    "attempt-count-text": {"attempt_count": "three"},
    "attempts-not-an-array": {"attempts": {"x": 1}},
    "attempt-not-an-object": {"attempts": [42]},
    "headers-not-strings": {"body": _BODY + '"headers": {"a": 1}}'},
    "retry-bad": {"body": _BODY + '"retry": {"max_attempts": "lots"}}'},
    "time-text": {"created_at": "yesterday"},
    "handler-ref-number": {"handler_ref": 7},
    "body-too-deep": {"body": '{"payload": ' + "[" * 3000 + "]" * 3000 + "}"},
    "time-past-year-9999": {"created_at": 10**18},
}
"""Each corruption: the stored fields that replace an intact task's."""
_NAMED = {
    "body-not-json": "body",
    "body-not-an-object": "body",
    "attempt-count-text": "attempt_count",
    "attempts-not-an-array": "attempts",
    "attempt-not-an-object": "attempts",
    "headers-not-strings": "headers",
    "retry-bad": "retry",
    "time-text": "created_at",
    "handler-ref-number": "handler_ref",
    "body-too-deep": "body",
    "time-past-year-9999": "created_at",
}


async def _neighbour(store: MongoStorage, task_id: str, due_minutes_ago: float) -> None:
    now = await store.now()
    at = now - timedelta(minutes=due_minutes_ago)
    task = Envelope(
        id=task_id, queue="q", handler_ref="app:ok", payload={"n": 1}, next_attempt_at=at
    )
    await store.enqueue(task)


async def _raw(store: MongoStorage, task_id: str) -> dict[str, Any]:
    doc = await store._connection().tasks.find_one({"_id": task_id})
    assert doc is not None
    return doc


@pytest.mark.asyncio
async def test_corrupt_documents_among_20_neighbours_never_strand_a_claim_batch(
    store: MongoStorage, write_corrupt: CorruptWriter
) -> None:
    for n in range(20):
        await _neighbour(store, f"ok-{n:02d}", due_minutes_ago=60 - 3 * n)
    for name, fields in CORRUPTIONS.items():
        await write_corrupt("q", f"bad-{name}", **fields)

    claimed = []
    while batch := await store.claim_due("q", 10, LONG, worker_id="w"):
        assert len(batch) <= 10
        claimed += batch
    by_id = {c.task.id: c for c in claimed}
    assert len(claimed) == len(by_id) == 20 + len(CORRUPTIONS), "every task claimed once"
    for n in range(20):
        task = by_id[f"ok-{n:02d}"].task
        assert task.corrupt is None and task.payload == {"n": 1}
    for name, fields in CORRUPTIONS.items():
        task = by_id[f"bad-{name}"].task
        assert (task.id, task.queue, task.status) == (f"bad-{name}", "q", Status.IN_FLIGHT)
        assert task.corrupt is not None, name
        assert _NAMED[name] in task.corrupt, f"{name}: {task.corrupt}"
        shown = next(iter(fields.values()))
        assert repr(shown)[:20] in task.corrupt or "raw stored value" in task.corrupt, name
        assert task.claimed_by == "w"

    failure = Attempt(number=1, outcome=Outcome.PERMANENT, error_type="rdq.CorruptTask")
    for name, fields in CORRUPTIONS.items():
        claim = by_id[f"bad-{name}"]
        await store.dead_letter(claim.task.id, claim.token, failure)
        got = await store.get(claim.task.id)
        assert got.status == Status.DEAD and got.corrupt is not None, name
        raw = await _raw(store, claim.task.id)
        for field, value in fields.items():
            kept = raw[field][: len(value)] if isinstance(value, list) else raw[field]
            assert kept == value, f"{name}: the raw {field} is kept for inspection"

    for include in (False, True):
        dead, cursor = await store.dlq_list("q", None, Page(include_attempts=include))
        assert cursor is None
        assert {t.id for t in dead} == {f"bad-{name}" for name in CORRUPTIONS}
        # Without attempts a listing does not read the records inside the array.
        unseen = set() if include else {"bad-attempt-not-an-object"}
        assert {t.id for t in dead if t.corrupt is None} == unseen
    listed, _ = await store.list_tasks("q", TaskFilter(status=Status.DEAD), Page(limit=3))
    assert len(listed) == 3
    groups = await store.dlq_groups("q")
    assert sum(g.count for g in groups) == len(CORRUPTIONS)
    assert (await store.stats("q")).dlq_depth == len(CORRUPTIONS)
    assert await store.redrive("q", Selector.by_ids("bad-attempt-count-text")) == 1
    assert (await store.get("bad-attempt-count-text")).status == Status.PENDING


@pytest.mark.asyncio
async def test_a_lapsed_lease_on_a_corrupt_document_is_reclaimed_beside_its_neighbours(
    store: MongoStorage, write_corrupt: CorruptWriter
) -> None:
    await write_corrupt("q", "bad", attempts="not an array", attempt_count="three")
    [lapsing] = await store.claim_due("q", 1, timedelta(milliseconds=200), worker_id="w1")
    assert lapsing.task.id == "bad" and lapsing.task.corrupt is not None
    for n in range(3):
        await _neighbour(store, f"ok-{n}", due_minutes_ago=1)
    claimed: dict[str, Any] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60  # the 200 ms lease lapses by the server's clock
    while "bad" not in claimed:
        assert loop.time() < deadline, "the lapsed lease was never reclaimed"
        claimed.update({c.task.id: c for c in await store.claim_due("q", 10, LONG)})
        await asyncio.sleep(0.05)
    assert set(claimed) == {"bad", "ok-0", "ok-1", "ok-2"}
    reclaimed = claimed["bad"].task
    assert reclaimed.corrupt is not None and "attempts" in reclaimed.corrupt
    raw = await _raw(store, "bad")
    assert (raw["attempts"], raw["attempt_count"]) == ("not an array", "three")
    assert raw["last_error_type"] == "LeaseExpired"

    again = reclaimed.lease_expires_at
    assert again is not None
    failed = Attempt(number=2, outcome=Outcome.FAILED, error_type="Boom")
    await store.reschedule("bad", claimed["bad"].token, failed, again)
    assert (await store.get("bad")).status == Status.PENDING


@pytest.mark.asyncio
async def test_an_unknown_status_or_id_type_reads_back_corrupt_and_counts_nothing_wrong(
    store: MongoStorage, write_corrupt: CorruptWriter
) -> None:
    await write_corrupt("q", "odd", status="SLEEPING")
    got = await store.get("odd")
    assert got.status == Status.DEAD and got.corrupt is not None
    assert "SLEEPING" in got.corrupt
    assert await store.claim_due("q", 10, LONG) == []
    await store.stats("q")
    assert [s.queue for s in await store.list_queues()] == ["q"]


def test_a_bson_date_past_year_9999_reads_as_corrupt_not_as_a_failed_result(
    store: MongoStorage,
) -> None:
    """A foreign producer may store a BSON date that no ``datetime`` holds (SecantusDB
    refuses to store one, so the document is decoded here as the store's client decodes a
    reply): it reads as corrupt instead of failing the whole batch it came in."""
    from bson import decode, encode

    from rdq_mongo._codec import envelope_from_document, envelope_to_document

    document = envelope_to_document(Envelope(id="far", queue="q", handler_ref="app:ok"))
    document["created_at"] = DatetimeMS(10**15)  # milliseconds: the year 33658
    options = store._connection().client.codec_options
    task = envelope_from_document(decode(encode(document), codec_options=options))
    assert task.corrupt is not None and "created_at" in task.corrupt
    assert (task.id, task.queue, task.created_at) == ("far", "q", None)
