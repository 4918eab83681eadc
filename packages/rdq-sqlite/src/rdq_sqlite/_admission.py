"""Admission (``enqueue``, ``enqueue_batch``, ``import_tasks``, and ``admit`` under a dedup
key): new tasks stored inside one write transaction, idempotent by id, all or nothing. The
write transaction serializes admissions, so ``admit`` reads who holds the key and acts on it
with no other admission in between.

Each function takes the connection of the store's write link (already inside ``BEGIN
IMMEDIATE``, see :mod:`rdq_sqlite._connection`) and validated arguments, and either returns one
"stored" flag per task or raises ``IDConflict`` with nothing stored (the transaction is rolled
back).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from rdq.errors import DedupConflict, IDConflict
from rdq.spi import (
    AdmitOutcome,
    Admitted,
    Dedup,
    DedupMode,
    Envelope,
    Status,
    first_of_each_id,
    stored_flags,
)
from rdq_sqlite._clock import tick
from rdq_sqlite._codec import ids_param, import_row, json_text, new_row, to_us
from rdq_sqlite._queries import SQL

__all__ = ["admit", "enqueue", "import_tasks"]

_US = 1_000_000
_LIVE = (Status.PENDING.value, Status.IN_FLIGHT.value)


def _new(conn: sqlite3.Connection, tasks: Sequence[Envelope]) -> list[Envelope]:
    """The first task of each id that the database does not hold yet. ``IDConflict`` (and
    nothing stored) for an id given in two queues of the batch or held by another queue."""
    unique = first_of_each_id(tasks)
    rows = conn.execute(SQL.existing_queues, {"ids": ids_param([t.id for t in unique])}).fetchall()
    existing: dict[str, str] = dict(rows)
    for task in unique:
        queue = existing.get(task.id)
        if queue is not None and queue != task.queue:
            raise IDConflict(task.id, queue)
    return [task for task in unique if task.id not in existing]


def enqueue(conn: sqlite3.Connection, tasks: Sequence[Envelope], delay_us: int) -> list[bool]:
    """Admit ``tasks``; one "stored" flag per task (see :func:`_new` for ``IDConflict``)."""
    now = tick(conn)
    new = _new(conn, tasks)
    rows = []
    for task in new:
        due = to_us(task.next_attempt_at)
        rows.append(new_row(task, None, now, now + delay_us if due is None else due))
    conn.executemany(SQL.enqueue, rows)
    return stored_flags(tasks, {task.id for task in new})


def import_tasks(conn: sqlite3.Connection, tasks: Sequence[Envelope]) -> list[bool]:
    """Store tasks verbatim; one "stored" flag per task (see :func:`_new` for
    ``IDConflict``)."""
    new = _new(conn, tasks)
    conn.executemany(SQL.import_tasks, [import_row(task) for task in new])
    return stored_flags(tasks, {task.id for task in new})


def admit(
    conn: sqlite3.Connection, task: Envelope, dedup: Dedup, delay_us: int
) -> tuple[Admitted, bool]:
    """``admit`` inside the write transaction; what it did, and whether a task became due
    (the doorbell rings for it)."""
    now = tick(conn)
    if not _new(conn, [task]):  # IDConflict for an id of another queue
        return Admitted(outcome=AdmitOutcome.SKIPPED, task_id=task.id, queue=task.queue), False
    row = conn.execute(SQL.dedup_hold, {"key": dedup.key}).fetchone()
    window_us = None if dedup.window is None else round(dedup.window * _US)
    if row is None or not _held(row, now):
        due = to_us(task.next_attempt_at)
        conn.execute(SQL.enqueue, new_row(task, None, now, now + delay_us if due is None else due))
        until = None if window_us is None else now + window_us
        taken = {"key": dedup.key, "task_id": task.id, "queue": task.queue, "until_us": until}
        conn.execute(SQL.dedup_take, taken)
        return Admitted(outcome=AdmitOutcome.ADDED, task_id=task.id, queue=task.queue), True
    holder, queue, _, status, created = row
    if queue != task.queue:
        raise DedupConflict(dedup.key, queue, holder)
    held = Admitted(outcome=AdmitOutcome.SKIPPED, task_id=holder, queue=queue)
    if dedup.mode == DedupMode.EXTEND and window_us is not None:
        conn.execute(SQL.dedup_extend, {"key": dedup.key, "until_us": now + window_us})
        return Admitted(outcome=AdmitOutcome.EXTENDED, task_id=holder, queue=queue), False
    if dedup.mode not in (DedupMode.REPLACE, DedupMode.DEBOUNCE) or status != "PENDING":
        return held, False
    due = None
    if dedup.mode == DedupMode.DEBOUNCE:
        wanted = to_us(task.next_attempt_at)
        wanted = now + delay_us if wanted is None else wanted
        latest = (created if created is not None else now) + round((dedup.max_age or 0) * _US)
        due = max(now, min(wanted, latest))
        if window_us is not None:
            conn.execute(SQL.dedup_extend, {"key": dedup.key, "until_us": now + window_us})
    values = {
        "id": holder,
        "payload": json_text(task.payload),
        "headers": json_text(task.headers) if task.headers else "{}",
        "due": due,
    }
    conn.execute(SQL.dedup_replace, values)
    return Admitted(outcome=AdmitOutcome.REPLACED, task_id=holder, queue=queue), due is not None


def _held(row: tuple[object, ...], now: int) -> bool:
    """Whether a dedup row (task_id, queue, until_us, status, created_at) holds its key."""
    _, _, until, status, _ = row
    if status is None:  # its task is gone
        return False
    if until is not None:
        return isinstance(until, int) and until > now
    return status in _LIVE
