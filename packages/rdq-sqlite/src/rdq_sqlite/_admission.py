"""Admission (``enqueue``, ``enqueue_batch``, ``import_tasks``): new tasks stored inside one
write transaction, idempotent by id, all or nothing.

Each function takes the connection of the store's write link (already inside ``BEGIN
IMMEDIATE``, see :mod:`rdq_sqlite._connection`) and validated arguments, and either returns one
"stored" flag per task or raises ``IDConflict`` with nothing stored (the transaction is rolled
back).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from rdq.errors import IDConflict
from rdq.spi import Envelope, first_of_each_id, stored_flags
from rdq_sqlite._clock import tick
from rdq_sqlite._codec import ids_param, import_row, new_row, to_us
from rdq_sqlite._queries import SQL

__all__ = ["enqueue", "import_tasks"]


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
