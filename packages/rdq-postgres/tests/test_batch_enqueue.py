"""``enqueue_batch``: the statement for new tasks, the one for any task, and their conflicts."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import msgspec
import pytest

from rdq.errors import IDConflict, NotFound, StorageError, ValidationError
from rdq.spi import Attempt, Envelope, Outcome, RetryOverride, bounds
from rdq_postgres import PostgresStorage

_PAYLOADS: list[Any] = [
    None,
    0,
    -1.5e300,
    "\x00 nul, \u2028 and \U0001f600",
    {"nested": [1, {"a": None}], "": ""},
    [True, False, 2**62],
]
_AT = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _task(task_id: str, queue: str = "q", **kw: Any) -> Envelope:
    return Envelope(id=task_id, queue=queue, handler_ref="mod:fn", **kw)


def _fresh(n: int, prefix: str = "f", **kw: Any) -> list[Envelope]:
    return [
        _task(
            f"{prefix}{i}",
            queue=("q", "r")[i % 2],
            payload=_PAYLOADS[i % len(_PAYLOADS)],
            headers={"h": f"v{i}", "\x00": "\x00"} if i % 3 == 0 else {},
            **kw,
        )
        for i in range(n)
    ]


def _plain(n: int, prefix: str = "p") -> list[Envelope]:
    """What ``Client.submit_many`` builds most often: one queue and handler, no headers."""
    return [_task(f"{prefix}{i}", payload=_PAYLOADS[i % len(_PAYLOADS)]) for i in range(n)]


def _aged(n: int, prefix: str = "o") -> list[Envelope]:
    """Tasks with history: redriven, with attempts, a retry override, unknown fields, a due
    time of their own."""
    attempts = [
        Attempt(number=1, outcome=Outcome.FAILED, error_type="Boom\x00", error_message="x"),
        Attempt(number=2, outcome=Outcome.LEASE_EXPIRED, started_at=_AT, finished_at=_AT),
    ]
    return [
        _task(
            f"{prefix}{i}",
            payload=_PAYLOADS[i % len(_PAYLOADS)],
            headers={"trace": str(i)},
            attempt_count=2,
            redrive_count=i,
            attempts=attempts,
            retry=RetryOverride(max_attempts=5, base=0.5) if i % 2 else None,
            next_attempt_at=_AT if i % 2 else None,
            format_version=1,
            extra={"future": {"k": [i, "\x00"]}, "also": None} if i % 3 else {},
        )
        for i in range(n)
    ]


def _stored_fields(task: Envelope, due: bool = True) -> dict[str, Any]:
    """What the store keeps as given (the rest it sets itself; the due time when ``due`` is
    False)."""
    fields = msgspec.structs.asdict(task)
    for name in ("status", "created_at", "lease_expires_at", "completed_at", "dead_lettered_at"):
        del fields[name]
    if not due:
        del fields["next_attempt_at"]
    return fields


async def _assert_round_trip(
    storage: PostgresStorage, tasks: list[Envelope], delay: timedelta = timedelta(0)
) -> None:
    for task in tasks:
        got = await storage.get(task.id)
        given = task.next_attempt_at is not None
        assert _stored_fields(got, given) == _stored_fields(task, given)
        assert got.status == "PENDING"
        assert got.created_at is not None and got.next_attempt_at is not None
        if task.next_attempt_at is None:
            assert got.next_attempt_at - got.created_at == delay
        for name in ("lease_expires_at", "completed_at", "dead_lettered_at"):
            assert getattr(got, name) is None


@pytest.mark.asyncio
async def test_new_tasks_round_trip(storage: PostgresStorage) -> None:
    tasks = _fresh(12)
    delay = timedelta(seconds=90)
    assert await storage.enqueue_batch(tasks, delay=delay) == [True] * 12
    await _assert_round_trip(storage, tasks, delay)
    # again: already there, nothing changes
    assert await storage.enqueue_batch(tasks) == [False] * 12
    await _assert_round_trip(storage, tasks, delay)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["plain", "handlers", "headers", "queues"])
async def test_new_tasks_of_every_shape_round_trip(storage: PostgresStorage, shape: str) -> None:
    tasks = _plain(7)
    for i, task in enumerate(tasks):
        if shape == "handlers":
            task.handler_ref = f"mod:fn{i % 2}"
        elif shape == "headers" and i == 6:
            task.headers = {"only": "last"}
        elif shape == "queues" and i == 6:
            task.queue = "last"
    assert await storage.enqueue_batch(tasks, delay=timedelta(seconds=5)) == [True] * 7
    await _assert_round_trip(storage, tasks, timedelta(seconds=5))


@pytest.mark.asyncio
async def test_tasks_with_history_round_trip(storage: PostgresStorage) -> None:
    tasks = _aged(8)
    assert await storage.enqueue_batch(tasks) == [True] * 8
    await _assert_round_trip(storage, tasks)
    got = await storage.get("o1")
    assert got.next_attempt_at == _AT and got.extra == {"future": {"k": [1, "\x00"]}, "also": None}
    assert got.attempts[0].error_type == "Boom\x00"


@pytest.mark.asyncio
async def test_batch_stores_what_enqueue_stores(storage: PostgresStorage) -> None:
    tasks = _aged(6) + _fresh(6)
    for task in tasks:
        assert await storage.enqueue(msgspec.structs.replace(task, id=f"single-{task.id}"))
    assert await storage.enqueue_batch(tasks) == [True] * 12
    for task in tasks:
        one, many = await storage.get(f"single-{task.id}"), await storage.get(task.id)
        given = task.next_attempt_at is not None
        assert _stored_fields(one, given) | {"id": task.id} == _stored_fields(many, given)


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["plain", "new", "aged", "mixed"])
async def test_flags_present_and_duplicates(storage: PostgresStorage, kind: str) -> None:
    tasks = {"plain": _plain(6), "new": _fresh(6), "aged": _aged(6), "mixed": _fresh(3) + _aged(3)}[
        kind
    ]
    assert await storage.enqueue_batch(tasks[::2]) == [True] * 3
    again = [*tasks, tasks[1], tasks[0]]
    assert await storage.enqueue_batch(again) == [False, True] * 3 + [False, False]
    await _assert_round_trip(storage, tasks)
    assert await storage.enqueue_batch([]) == []


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["plain", "new", "aged", "mixed"])
@pytest.mark.parametrize("position", [0, 5, 9])
async def test_id_in_another_queue_stores_nothing(
    storage: PostgresStorage, kind: str, position: int
) -> None:
    assert await storage.enqueue(_task("taken", queue="elsewhere")) is True
    assert await storage.enqueue(_task("f4")) is True  # present in the same queue: fine
    tasks = {
        "plain": _plain(10),
        "new": _fresh(10),
        "aged": _aged(10),
        "mixed": _fresh(5) + _aged(5, prefix="o"),
    }[kind]
    tasks[position] = _task("taken", queue="q", payload=1)
    with pytest.raises(IDConflict) as caught:
        await storage.enqueue_batch(tasks)
    assert (caught.value.task_id, caught.value.existing_queue) == ("taken", "elsewhere")
    for task in tasks:
        if task.id not in ("taken", "f4"):
            with pytest.raises(NotFound):
                await storage.get(task.id)
    assert (await storage.get("taken")).queue == "elsewhere"


@pytest.mark.asyncio
async def test_first_conflict_in_batch_order_is_named(storage: PostgresStorage) -> None:
    await storage.enqueue_batch([_task("x", queue="a"), _task("y", queue="b")])
    with pytest.raises(IDConflict) as caught:
        await storage.enqueue_batch([_task("n"), _task("y"), _task("x")])
    assert (caught.value.task_id, caught.value.existing_queue) == ("y", "b")


@pytest.mark.asyncio
async def test_conflict_within_the_batch(storage: PostgresStorage) -> None:
    with pytest.raises(IDConflict) as caught:
        await storage.enqueue_batch([_task("a"), _task("b"), _task("a", queue="z")])
    assert (caught.value.task_id, caught.value.existing_queue) == ("a", "q")
    with pytest.raises(NotFound):
        await storage.get("a")


def _bad_tasks() -> list[tuple[Envelope, str]]:
    good = _task("ok")
    bad: list[tuple[dict[str, Any], str]] = [
        ({"id": "bad id"}, "id"),
        ({"id": 7}, "id"),
        ({"queue": "-q"}, "queue"),
        ({"handler_ref": "a b"}, "handler_ref"),
        ({"headers": None}, "headers"),
        ({"headers": {"h": 1}}, "headers.h"),
        ({"attempt_count": -1}, "attempt_count"),
        ({"redrive_count": -1}, "redrive_count"),
        ({"next_attempt_at": datetime(2030, 1, 1)}, "next_attempt_at"),
        ({"payload": object()}, "payload"),
        ({"payload": "x" * bounds.MAX_PAYLOAD_BYTES}, "payload"),
    ]
    return [(msgspec.structs.replace(good, **change), field) for change, field in bad]


@pytest.mark.asyncio
@pytest.mark.parametrize(("bad", "field"), _bad_tasks())
async def test_invalid_task_is_named_and_nothing_stored(
    storage: PostgresStorage, bad: Envelope, field: str
) -> None:
    with pytest.raises(ValidationError) as expected:
        bounds.check_task(bad)
    assert expected.value.field == field
    # the same queue and handler before it, so the batch has checked those names already
    batch = [_task("a"), _task("b", queue="r"), bad, _task("c")]
    with pytest.raises(ValidationError) as caught:
        await storage.enqueue_batch(batch)
    assert caught.value.field == field
    assert str(caught.value) == str(expected.value)
    for task_id in ("a", "b", "c"):
        with pytest.raises(NotFound):
            await storage.get(task_id)


@pytest.mark.asyncio
async def test_not_an_envelope(storage: PostgresStorage) -> None:
    with pytest.raises(ValidationError) as caught:
        await storage.enqueue_batch([_task("a"), dataclasses.make_dataclass("T", [])()])  # type: ignore[list-item]
    assert caught.value.field == "task"


@pytest.mark.asyncio
async def test_conflict_error_is_mapped(storage: PostgresStorage) -> None:
    """The statement's RQ409 error becomes IDConflict; a malformed one a StorageError."""
    async with storage._db.pool.connection() as conn:
        with pytest.raises(asyncpg.PostgresError) as raised:
            await conn.fetchval(f'SELECT "{storage.config.schema}".id_conflict($1, $2)', "i", "q")
    assert raised.value.sqlstate == "RQ409"
    from rdq_postgres._errors import id_conflict

    err = id_conflict(raised.value.detail, "h:1", str(raised.value))  # type: ignore[attr-defined]
    assert isinstance(err, IDConflict) and (err.task_id, err.existing_queue) == ("i", "q")
    malformed = id_conflict("not json", "h:1", str(raised.value))
    assert isinstance(malformed, StorageError) and not isinstance(malformed, IDConflict)
