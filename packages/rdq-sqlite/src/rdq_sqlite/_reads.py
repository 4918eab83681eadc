"""The store's reads: functions of the read link's connection (see :mod:`._connection`).

In WAL mode a read never waits for a writer and sees every transaction committed before it
started; the multi-statement ones run in one read snapshot.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from rdq.spi import AuditEntry, DLQGroup, Envelope, Stats, Status, group_order
from rdq_sqlite._clock import now_for_read
from rdq_sqlite._codec import at_us, audit_from_row, envelope_from_row, from_us
from rdq_sqlite._queries import SQL

__all__ = [
    "audit_page",
    "counts",
    "data_version",
    "dlq_groups",
    "get",
    "next_due",
    "now",
    "page",
]


def get(conn: sqlite3.Connection, task_id: str) -> Envelope | None:
    row = conn.execute(SQL.get, {"id": task_id}).fetchone()
    return None if row is None else envelope_from_row(row)


def page(conn: sqlite3.Connection, params: dict[str, Any]) -> list[Envelope]:
    """The rows of ``list_tasks.sql`` for ``params`` as envelopes."""
    return [envelope_from_row(row) for row in conn.execute(SQL.list_tasks, params)]


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


def data_version(conn: sqlite3.Connection) -> int:
    """A number that changes whenever another connection commits to the database."""
    version: int = conn.execute("PRAGMA data_version").fetchone()[0]
    return version


def next_due(conn: sqlite3.Connection, queue: str) -> tuple[int, int | None, int]:
    """``(now, earliest due time of queue or None, data_version)``, all in microseconds."""
    due = conn.execute(SQL.next_due, {"queue": queue}).fetchone()[0]
    return now_for_read(conn), due, data_version(conn)


def audit_page(conn: sqlite3.Connection, params: dict[str, Any]) -> list[AuditEntry]:
    return [audit_from_row(row) for row in conn.execute(SQL.list_audit, params)]
