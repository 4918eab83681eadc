"""Admitting tasks: ``enqueue``, ``enqueue_batch``, ``import_tasks``, and ``admit`` under a
dedup key.

A batch (of ``enqueue_batch`` or ``import_tasks``) is all-or-nothing: when one of its ids
lives in another queue it raises ``IDConflict`` and stores nothing. Ids that exist are
checked before anything is written; what remains is a producer that puts one of the batch's
ids into another queue between that check and the batch's write. How that race ends
depends on the server:

* **with transactions** (a replica-set member or mongos): the check and the writes are one
  transaction. A concurrent write of one of its ids makes it conflict and run again, so the
  batch sees the other task and raises ``IDConflict`` having stored nothing. Exact.
* **without** (a standalone server): the batch's inserts carry a random ``admission`` mark;
  on ``IDConflict`` it deletes the still-PENDING tasks that carry its mark. A task loses the
  mark when another producer enqueues the same id in the same queue (that producer was told
  it is stored) or a worker claims it, so the undo never deletes a task another producer was
  told exists; such a task stays and runs. Weaker: the batch may leave those few tasks
  stored although it raised.

Each admission first reads the order of the tasks' queues (their control documents' ``*``
elements, read once a second at most: ``_controls.admission_orders``) and stores a task of a
fair or aged queue with its group (``grp_for``, ``grp``: ``_codec.group_fields``), so that a
claim reads it by its group without writing it first. A task admitted while the queue's order
changes (or within the second after) may be stored with the group of the order it read; the
claim regroups any live task grouped under another order than its own before it reads
(``_claims._order``), so that costs a write, never a place in the order.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import msgspec
from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from rdq.errors import DedupConflict, IDConflict, StorageError
from rdq.spi import (
    AdmitOutcome,
    Admitted,
    ClaimOrder,
    Dedup,
    DedupMode,
    Envelope,
    Status,
    envelope_to_builtins,
    first_of_each_id,
    stored_flags,
)
from rdq_mongo._codec import envelope_to_document, group_fields, to_micros
from rdq_mongo._connection import server_now
from rdq_mongo._controls import admission_orders
from rdq_mongo._updates import enqueue_fresh, import_fresh, upsert_unless_exists

if TYPE_CHECKING:
    from pymongo.asynchronous.client_session import AsyncClientSession

    from rdq_mongo._connection import Connection, Document
    from rdq_mongo._updates import Pipeline

__all__ = ["Admission", "admit_batch", "admit_dedup", "admit_one"]

_DUPLICATE_KEY = 11000
# A transaction that lost a race on one of its ids is run again; a handful of rounds settles
# any realistic contention (each round sees the ids the others committed).
_TRANSACTION_ROUNDS = 8


class Admission:
    """One task offered for admission: its id, its queue and what to store if it is new."""

    def __init__(self, task: Envelope, fresh: Document) -> None:
        self.task = task
        self.fresh = fresh

    @classmethod
    def enqueued(cls, task: Envelope, delay: timedelta | None) -> Admission:
        """``task`` as ``enqueue`` stores it: PENDING, created and due by the server clock."""
        delay_us = (delay or timedelta(0)) // timedelta(microseconds=1)
        document = envelope_to_document(task)
        return cls(task, enqueue_fresh(document, to_micros(task.next_attempt_at), delay_us))

    @classmethod
    def imported(cls, task: Envelope) -> Admission:
        """``task`` as ``import_tasks`` stores it: exactly as given, with no claim token."""
        return cls(task, import_fresh(envelope_to_document(task)))

    def grouped(self, order: ClaimOrder) -> Admission:
        """Store the task with its group in a queue of ``order`` (no field for strict)."""
        fields = group_fields(order, self.task.keys)
        if fields:
            self.fresh = {"$mergeObjects": [self.fresh, {"$literal": fields}]}
        return self

    def pipeline(self, admission: str | None = None) -> Pipeline:
        return upsert_unless_exists(self.fresh, self.task.queue, admission)

    def upsert(self, admission: str | None = None) -> UpdateOne:
        return UpdateOne({"_id": self.task.id}, self.pipeline(admission), upsert=True)


async def admit_one(connection: Connection, item: Admission) -> bool:
    """``enqueue``: one upsert that inserts the task unless its id exists; the previous
    document says which."""
    task = item.task
    order = (await admission_orders(connection, [task.queue]))[task.queue]
    pipeline = item.grouped(order).pipeline()
    before: Document | None = None
    for _ in range(2):
        try:
            before = await connection.tasks.find_one_and_update(
                {"_id": task.id},
                pipeline,
                upsert=True,
                projection={"queue": 1},
                return_document=ReturnDocument.BEFORE,
            )
            break
        except DuplicateKeyError:
            # Two upserts of one new id raced; the loser now sees the winner's task.
            continue
    else:
        raise StorageError(f"enqueue of {task.id!r} kept racing another producer")
    if before is None:
        return True
    if before.get("queue") != task.queue:
        raise IDConflict(task.id, str(before.get("queue")))
    return False


async def admit_batch(
    connection: Connection, tasks: Sequence[Envelope], admit: Callable[[Envelope], Admission]
) -> list[bool]:
    """One "stored" flag per task, in order, each task offered as ``admit`` makes it (see the
    module docstring)."""
    unique = [admit(task) for task in first_of_each_id(tasks)]
    if unique:
        orders = await admission_orders(connection, {item.task.queue for item in unique})
        for item in unique:
            item.grouped(orders[item.task.queue])
    if connection.transactions:
        inserted = await _in_transaction(connection, unique)
    else:
        inserted = await _with_undo(connection, unique)
    return stored_flags(tasks, inserted)


async def _existing(
    connection: Connection, items: Sequence[Admission], session: AsyncClientSession | None
) -> dict[str, Any]:
    """The queue of each of ``items``' ids that exists; ``IDConflict`` if one is in another
    queue than its item's."""
    found = {
        doc["_id"]: doc.get("queue")
        async for doc in connection.tasks.find(
            {"_id": {"$in": [item.task.id for item in items]}},
            projection={"queue": 1},
            session=session,
        )
    }
    for item in items:
        queue = found.get(item.task.id, item.task.queue)
        if queue != item.task.queue:
            raise IDConflict(item.task.id, str(queue))
    return found


async def _in_transaction(connection: Connection, items: Sequence[Admission]) -> set[str]:
    """Check and insert in one transaction; return the ids inserted."""

    async def body(session: AsyncClientSession) -> set[str]:
        existing = await _existing(connection, items, session)
        fresh = [item for item in items if item.task.id not in existing]
        if not fresh:
            return set()
        await connection.tasks.bulk_write(
            [item.upsert() for item in fresh], ordered=True, session=session
        )
        return {item.task.id for item in fresh}

    for _ in range(_TRANSACTION_ROUNDS):
        async with connection.client.start_session() as session:
            try:
                return await session.with_transaction(body)
            except (BulkWriteError, DuplicateKeyError, OperationFailure) as exc:
                # A transaction that inserts an id another producer committed after it
                # started fails with a duplicate key (some servers say WriteConflict, which
                # with_transaction retries by itself); a new round sees that task.
                if not _duplicate_key(exc):
                    raise
    raise StorageError("enqueue_batch kept racing other producers on the same ids")


async def _with_undo(connection: Connection, items: Sequence[Admission]) -> set[str]:
    """Check, then insert with this batch's mark; on a cross-queue race, undo what is still
    this batch's and raise ``IDConflict``. Return the ids inserted."""
    existing = await _existing(connection, items, None)
    mark = secrets.token_hex(12)
    # Every id is written, existing ones too: a same-queue task found by the upsert loses any
    # other batch's mark in the same atomic step that tells this batch it exists.
    operations = [item.upsert(mark) for item in items]
    try:
        result = await connection.tasks.bulk_write(operations, ordered=False)
        upserted: dict[int, Any] = result.upserted_ids or {}
    except BulkWriteError as exc:
        # A concurrent producer inserted some ids first (duplicate key on upsert).
        upserted = {u["index"]: u["_id"] for u in exc.details.get("upserted", [])}
        failed = [e for e in exc.details.get("writeErrors", []) if e.get("code") != _DUPLICATE_KEY]
        if failed:
            raise StorageError(f"batch enqueue failed: {failed[0].get('errmsg')}") from exc
    inserted = {items[index].task.id for index in upserted}
    raced = [item for item in items if item.task.id not in inserted | set(existing)]
    if raced:
        try:
            await _existing(connection, raced, None)
        except IDConflict:
            if inserted:
                await connection.tasks.delete_many(
                    {
                        "_id": {"$in": sorted(inserted)},
                        "admission": mark,
                        "status": Status.PENDING.value,
                    }
                )
            raise
    return inserted


def _duplicate_key(exc: Exception) -> bool:
    if isinstance(exc, BulkWriteError):
        errors = exc.details.get("writeErrors", [])
        return bool(errors) and all(e.get("code") == _DUPLICATE_KEY for e in errors)
    return isinstance(exc, OperationFailure) and exc.code == _DUPLICATE_KEY


# --- dedup keys ---------------------------------------------------------------------------
#
# A key is one document of the dedup collection, ``{_id: key, task, queue, until, taken,
# version}``; every change of it is a compare-and-set on ``version`` (or the insert of a new
# ``_id``), so of the admissions that found a key free only one takes it — the others see
# it taken and read again. The task is inserted after the key is taken (``taken`` set, then
# cleared once the task exists): for RESERVED seconds a key whose task does not exist yet
# counts as held (its taker is inserting it); past that, a taker that died in between no
# longer holds it. A replacement writes the holder's body only while it is still PENDING with
# the body read (else it reads again), so it never loses another's. A key whose task is gone
# is free, so a purge or an expiry needs no change here; the documents of keys never used
# again stay (one small document per key).

RESERVED = 30.0
"""Seconds a key taken for a task not yet inserted counts as held."""
_ROUNDS = 20


async def admit_dedup(
    connection: Connection, task: Envelope, dedup: Dedup, delay: timedelta | None
) -> Admitted:
    """``admit``: read the key and the id, decide, and act by compare-and-set, again from
    the start when another admission changed the key in between."""
    for _ in range(_ROUNDS):
        now = await _now_us(connection)
        existing = await connection.tasks.find_one({"_id": task.id}, projection={"queue": 1})
        if existing is not None:
            if existing.get("queue") != task.queue:
                raise IDConflict(task.id, str(existing.get("queue")))
            return Admitted(outcome=AdmitOutcome.SKIPPED, task_id=task.id, queue=task.queue)
        record = await connection.dedup.find_one({"_id": dedup.key})
        holder = await _holder(connection, record, now)
        if holder is None:
            if await _take(connection, record, task, dedup, now):
                stored = await admit_one(connection, Admission.enqueued(task, delay))
                # the task exists now: from here on its existence decides (taken cleared)
                await connection.dedup.update_one(
                    {"_id": dedup.key, "task": task.id}, {"$set": {"taken": None}}
                )
                if not stored:  # an enqueue of the same id got there first: it keeps the key
                    return Admitted(outcome=AdmitOutcome.SKIPPED, task_id=task.id, queue=task.queue)
                return Admitted(outcome=AdmitOutcome.ADDED, task_id=task.id, queue=task.queue)
            continue
        if record is None:  # unreachable: a holder comes from a record
            continue
        held_in, holder_id = str(record["queue"]), str(record["task"])
        if held_in != task.queue:
            raise DedupConflict(dedup.key, held_in, holder_id)
        held = Admitted(outcome=AdmitOutcome.SKIPPED, task_id=holder_id, queue=held_in)
        if dedup.mode == DedupMode.EXTEND and dedup.window is not None:
            if await _set_until(connection, record, now + _micros(dedup.window)):
                return msgspec.structs.replace(held, outcome=AdmitOutcome.EXTENDED)
            continue
        if dedup.mode not in (DedupMode.REPLACE, DedupMode.DEBOUNCE):
            return held
        if holder.get("status") != Status.PENDING.value:
            return held
        old_body = holder.get("body")
        body = msgspec.json.decode(old_body) if isinstance(old_body, str) else {}
        new = envelope_to_builtins(task)
        body["payload"], body["headers"] = new.get("payload"), new.get("headers", {})
        changes: Document = {"body": msgspec.json.encode(body).decode("utf-8")}
        if dedup.mode == DedupMode.DEBOUNCE:
            wanted = to_micros(task.next_attempt_at)
            if wanted is None:
                wanted = now + (delay or timedelta(0)) // timedelta(microseconds=1)
            created = holder.get("created_at")
            latest = (created if isinstance(created, int) else now) + _micros(dedup.max_age)
            due = max(now, min(wanted, latest))
            # the due and status times follow next_attempt_at, as retry_now sets them
            changes.update(next_attempt_at=due, due=due, status_at=due)
        result = await connection.tasks.update_one(
            {"_id": holder_id, "status": Status.PENDING.value, "body": old_body},
            {"$set": changes},
        )
        if not result.matched_count:  # claimed, or replaced by another, meanwhile: read again
            continue
        if dedup.mode == DedupMode.DEBOUNCE and dedup.window is not None:
            await _set_until(connection, record, now + _micros(dedup.window))
        return msgspec.structs.replace(held, outcome=AdmitOutcome.REPLACED)
    raise StorageError(f"dedup key {dedup.key!r} kept changing under the admission; try again")


async def _now_us(connection: Connection) -> int:
    now = to_micros(await server_now(connection))
    if now is None:  # pragma: no cover - the server always answers a time
        raise StorageError("the server answered no time")
    return now


def _micros(seconds: float | None) -> int:
    return round((seconds or 0) * 1_000_000)


async def _holder(connection: Connection, record: Document | None, now: int) -> Document | None:
    """The holder of a key record at ``now`` (``None``: the key is free); a task not yet
    inserted by a taker within RESERVED seconds stands in as ``{}``."""
    if record is None:
        return None
    task = await connection.tasks.find_one(
        {"_id": record.get("task")}, projection={"status": 1, "created_at": 1, "body": 1}
    )
    if task is None:
        taken = record.get("taken")
        recent = isinstance(taken, int) and taken > now - _micros(RESERVED)
        return {} if recent else None
    until = record.get("until")
    if isinstance(until, int):
        return task if until > now else None
    live = (Status.PENDING.value, Status.IN_FLIGHT.value)
    return task if task.get("status") in live else None


async def _take(
    connection: Connection, record: Document | None, task: Envelope, dedup: Dedup, now: int
) -> bool:
    """Give the key to ``task``, if nobody changed it since ``record`` was read."""
    until = None if dedup.window is None else now + _micros(dedup.window)
    fields = {"task": task.id, "queue": task.queue, "until": until, "taken": now}
    if record is None:
        try:
            await connection.dedup.insert_one({"_id": dedup.key, **fields, "version": 1})
        except DuplicateKeyError:
            return False
        return True
    result = await connection.dedup.update_one(
        {"_id": dedup.key, "version": record.get("version")},
        {"$set": fields, "$inc": {"version": 1}},
    )
    return bool(result.modified_count)


async def _set_until(connection: Connection, record: Document, until: int) -> bool:
    result = await connection.dedup.update_one(
        {"_id": record["_id"], "version": record.get("version")},
        {"$set": {"until": until}, "$inc": {"version": 1}},
    )
    return bool(result.modified_count)
