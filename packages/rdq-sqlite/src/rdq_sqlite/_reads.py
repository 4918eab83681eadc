"""The store's reads that are not listings (those are in :mod:`._pages`, ``wait_due``'s in
:mod:`._notify`): functions of the read link's connection (see :mod:`._connection`).

In WAL mode a read never waits for a writer and sees every transaction committed before it
started; ``counts`` runs in one read snapshot.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime

from rdq.errors import NotFound
from rdq.spi import DLQGroup, Envelope, Stats, Status, group_order
from rdq_sqlite._clock import now_for_read
from rdq_sqlite._codec import at_us, envelope_from_row, from_us
from rdq_sqlite._queries import SQL

__all__ = ["counts", "dlq_groups", "get", "now"]


def get(conn: sqlite3.Connection, task_id: str) -> Envelope:
    """The task ``task_id``; ``NotFound`` if there is none."""
    row = conn.execute(SQL.get, {"id": task_id}).fetchone()
    if row is None:
        raise NotFound(task_id)
    return envelope_from_row(row)


def now(conn: sqlite3.Connection) -> datetime:
    return at_us(now_for_read(conn))


def counts(conn: sqlite3.Connection, queue: str | None) -> list[Stats]:
    """The stats of ``queue`` (``None``: of every queue holding a task), by queue name."""
    now_us = now_for_read(conn)
    as_of = at_us(now_us)
    if queue is None:
        rows = conn.execute(SQL.counts).fetchall()
    else:
        rows = conn.execute(SQL.queue_counts, {"queue": queue}).fetchall()
    per_queue: dict[str, dict[str, int]] = {}
    oldest: dict[str, int] = {}
    for name, status, count in rows:
        per_queue.setdefault(name, {})[status] = count
        if status == Status.PENDING:
            earliest = conn.execute(SQL.oldest_pending, {"queue": name}).fetchone()[0]
            if earliest is not None and earliest <= now_us:
                oldest[name] = earliest
    if queue is not None:
        per_queue.setdefault(queue, {})
    return [
        Stats(
            queue=name,
            pending=found.get(Status.PENDING, 0),
            in_flight=found.get(Status.IN_FLIGHT, 0),
            dlq_depth=found.get(Status.DEAD, 0),
            succeeded=found.get(Status.SUCCEEDED, 0),
            cancelled=found.get(Status.CANCELLED, 0),
            oldest_pending_age=(now_us - oldest[name]) / 1e6 if name in oldest else None,
            as_of=as_of,
        )
        for name, found in sorted(per_queue.items())
    ]


def dlq_groups(conn: sqlite3.Connection, queue: str) -> list[DLQGroup]:
    groups = []
    for handler_ref, error_type, count, first, last in conn.execute(
        SQL.dlq_groups, {"queue": queue}
    ):
        first_at, last_at = from_us(first), from_us(last)
        if first_at is None or last_at is None:
            continue  # only a row edited by hand lacks its dead-letter time
        groups.append(
            DLQGroup(
                handler_ref=handler_ref,
                error_type=error_type,
                count=count,
                first_dead_lettered_at=first_at,
                last_dead_lettered_at=last_at,
            )
        )
    groups.sort(key=group_order)
    return groups
