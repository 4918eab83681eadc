"""The listings: DLQ pages, task pages by status and audit pages.

Each is a function of the read link's connection (see :mod:`rdq_sqlite._connection`) taking
arguments the store has checked: it reads the cursor, fetches ``page.limit + 1`` rows with one
keyset seek (``list_tasks.sql``, ``list_audit.sql``) and cuts the page with
:func:`rdq.spi.page_of`. A cursor that does not belong to the listing raises ``StaleCursor``.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from rdq.errors import StaleCursor
from rdq.spi import (
    AuditEntry,
    AuditFilter,
    DLQCursor,
    DLQFilter,
    Envelope,
    KeysetCursor,
    Page,
    Status,
    TaskFilter,
    audit_scope,
    page_of,
    status_time,
    task_scope,
)
from rdq_sqlite._codec import (
    at_us,
    audit_from_row,
    audit_id,
    audit_seq,
    dlq_filter_params,
    envelope_from_row,
    filter_params,
    to_us,
)
from rdq_sqlite._queries import SQL

__all__ = ["audit_page", "dlq_page", "task_page"]

_LOWEST = -(2**63)
_HIGHEST = 2**63 - 1


def dlq_page(
    conn: sqlite3.Connection, queue: str, dlq_filter: DLQFilter | None, page: Page
) -> tuple[list[Envelope], str | None]:
    """DEAD tasks of ``queue`` by (dead_lettered_at, id), and the next cursor."""
    after: tuple[int, str] | None = None
    if page.cursor is not None:
        cursor = DLQCursor.decode(page.cursor, queue, dlq_filter)
        after = (to_us(cursor.dead_lettered_at) or 0, cursor.id)
    tasks = _tasks(conn, queue, Status.DEAD, dlq_filter_params(dlq_filter), after, page)
    return page_of(
        tasks,
        page.limit,
        _same,
        lambda last: DLQCursor.after(
            queue, dlq_filter, last.dead_lettered_at or at_us(0), last.id
        ).encode(),
    )


def task_page(
    conn: sqlite3.Connection, queue: str, task_filter: TaskFilter, page: Page
) -> tuple[list[Envelope], str | None]:
    """Tasks of ``queue`` in the filter's status by (status time, id), and the next cursor."""
    scope = task_scope(queue, task_filter)
    after: tuple[int, str] | None = None
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        after = (to_us(cursor.at) or 0, cursor.id)
    params = filter_params(
        task_filter.error_type,
        task_filter.handler_ref,
        to_us(task_filter.after),
        to_us(task_filter.before),
    )
    tasks = _tasks(conn, queue, task_filter.status, params, after, page)
    return page_of(
        tasks,
        page.limit,
        _same,
        lambda last: KeysetCursor.after(scope, _status_time(last), last.id).encode(),
    )


def _tasks(
    conn: sqlite3.Connection,
    queue: str,
    status: Status,
    params: dict[str, Any],
    after: tuple[int, str] | None,
    page: Page,
) -> list[Envelope]:
    """Up to ``page.limit + 1`` tasks (one more tells whether another page follows).

    The filter's lower time bound becomes the keyset start when it lies beyond the
    cursor: ``(status_at, id) > (lo, "")`` holds exactly when ``status_at >= lo``."""
    start = (params.pop("lo"), "")
    if after is not None and after > start:
        start = after
    rows = conn.execute(
        SQL.list_tasks,
        {
            "queue": queue,
            "status": str(status),
            "after_at": start[0],
            "after_id": start[1],
            "limit": page.limit + 1,
            "with_attempts": page.include_attempts,
            **params,
        },
    )
    return [envelope_from_row(row) for row in rows]


def audit_page(
    conn: sqlite3.Connection, audit_filter: AuditFilter | None, page: Page
) -> tuple[list[AuditEntry], str | None]:
    """Entries matching ``audit_filter``, newest first (by time, then sequence number), and
    the next cursor."""
    scope = audit_scope(audit_filter)
    f = audit_filter or AuditFilter()
    lo, hi = to_us(f.after), to_us(f.before)
    # the filter's upper bound is the keyset start unless the cursor lies before it:
    # (time, seq) < (hi, 0) holds exactly when time < hi (seq counts from 1)
    before = (_HIGHEST if hi is None else hi, 0)
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        seq = audit_seq(cursor.id)
        if seq is None:
            raise StaleCursor("malformed cursor")
        before = min(before, (to_us(cursor.at) or 0, seq))
    rows = conn.execute(
        SQL.list_audit,
        {
            "before_at": before[0],
            "before_seq": before[1],
            "lo": _LOWEST if lo is None else lo,
            "queue": f.queue,
            "action": f.action,
            "actor": f.actor,
            "limit": page.limit + 1,
        },
    ).fetchall()
    return page_of(
        rows,
        page.limit,
        audit_from_row,
        lambda last: KeysetCursor.after(scope, at_us(last[1]), audit_id(last[0])).encode(),
    )


def _same(task: Envelope) -> Envelope:
    return task


def _status_time(task: Envelope) -> datetime:
    return status_time(task) or at_us(0)
