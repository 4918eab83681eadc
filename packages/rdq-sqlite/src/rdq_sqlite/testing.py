"""Test hooks of the SQLite store (not part of the storage contract): write a stored task that
does not decode, as the compliance kit's ``corrupt_task`` fixture asks."""

from __future__ import annotations

import sqlite3

from rdq.spi import Envelope, bounds
from rdq_sqlite._clock import tick
from rdq_sqlite._codec import new_row
from rdq_sqlite._queries import SQL
from rdq_sqlite._store import SqliteStorage

__all__ = ["put_corrupt_task"]


async def put_corrupt_task(
    store: SqliteStorage,
    queue: str,
    task_id: str,
    raw: str = '{"id": ',
    *,
    kind: str = "undecodable",
) -> None:
    """Store a PENDING task of ``queue``, due now, as a hand edit would, whose payload column
    holds ``raw`` (JSON that does not decode), or, by ``kind``, JSON nested deeper than any
    decoder recurses (``"deep"``) or a ``created_at`` past the year 9999 (``"far_time"``). The
    compliance kit's corrupt-task clauses use it (see ``rdq_compliance.CorruptTaskWriter``)."""
    bounds.check_queue(queue)
    bounds.check_task_id(task_id)
    created_us: int | None = None
    if kind == "deep":
        raw = "[" * 5000 + "]" * 5000
    elif kind == "far_time":
        raw, created_us = "null", 10**18  # about the year 33658
    elif kind != "undecodable":
        raise ValueError(f"unknown kind of corrupt task: {kind!r}")
    await store._write(_put_corrupt, queue, task_id, raw, created_us)
    store._bell.ring([queue])


def _put_corrupt(
    conn: sqlite3.Connection, queue: str, task_id: str, raw: str, created_us: int | None
) -> None:
    """Inside the write transaction: a PENDING task due now whose payload is ``raw`` and, if
    given, whose ``created_at`` is ``created_us``."""
    now = tick(conn)
    row = new_row(Envelope(id=task_id, queue=queue, handler_ref="corrupt:task"), raw, now, now)
    if created_us is not None:
        row["created_at"] = created_us
    conn.execute(SQL.enqueue, row)
