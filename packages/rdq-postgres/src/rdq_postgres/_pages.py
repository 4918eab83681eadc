"""Every listing of the store — DLQ pages, task pages by status, audit pages — as keyset pages:
``list_tasks.sql`` / ``list_audit.sql`` with the slots of the page filled in (the status and
its time column, the keyset after a cursor), ``LIMIT limit + 1`` cut by
:func:`rdq.spi.page_of`. Arguments are already checked by ``StorageBase``."""

from __future__ import annotations

from typing import Any

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
    task_scope,
)
from rdq_postgres._codec import audit_from_row, envelope_from_row, filter_values, text_column
from rdq_postgres._connection import Database
from rdq_postgres._queries import Queries, Statement

__all__ = ["STATUS_TIME", "audit_page", "dlq_page", "task_page"]

STATUS_TIME = {
    # PENDING and IN_FLIGHT are listed by due_at, which is next_attempt_at and
    # lease_expires_at respectively (and is what task_live_idx holds).
    Status.PENDING: "due_at",
    Status.IN_FLIGHT: "due_at",
    Status.SUCCEEDED: "completed_at",
    Status.DEAD: "dead_lettered_at",
    Status.CANCELLED: "cancelled_at",
}
"""The column a status's tasks are listed (and paged) by."""


def _tasks_statement(sql: Queries, status: Status, *, after: bool) -> Statement:
    """list_tasks.sql for ``status``: the first page, or the page after a cursor."""
    keyset = "{task_keyset}" if after else ""
    return sql.load("list_tasks", status=status.value, at=STATUS_TIME[status], keyset=keyset)


async def dlq_page(
    db: Database, sql: Queries, queue: str, dlq_filter: DLQFilter | None, page: Page
) -> tuple[list[Envelope], str | None]:
    """DEAD tasks of ``queue`` matching ``dlq_filter`` by (dead_lettered_at, id): the DEAD
    page of list_tasks.sql."""
    values: dict[str, Any] = {
        "queue": queue,
        **filter_values(dlq_filter),
        "with_attempts": page.include_attempts,
        "limit": page.limit + 1,
    }
    if page.cursor is not None:
        cursor = DLQCursor.decode(page.cursor, queue, dlq_filter)
        values.update(cursor_at=cursor.dead_lettered_at, cursor_id=cursor.id)
    statement = _tasks_statement(sql, Status.DEAD, after=page.cursor is not None)
    rows = await db.fetch(statement, **values)
    return page_of(
        rows,
        page.limit,
        envelope_from_row,
        lambda row: DLQCursor.after(queue, dlq_filter, row["listed_at"], row["id"]).encode(),
    )


async def task_page(
    db: Database, sql: Queries, queue: str, task_filter: TaskFilter, page: Page
) -> tuple[list[Envelope], str | None]:
    """Tasks of ``queue`` in ``task_filter.status`` by (that status's time, id)."""
    scope = task_scope(queue, task_filter)
    values: dict[str, Any] = {
        "queue": queue,
        "error_type": text_column(task_filter.error_type),
        "handler_ref": task_filter.handler_ref,
        "after": task_filter.after,
        "before": task_filter.before,
        "with_attempts": page.include_attempts,
        "limit": page.limit + 1,
    }
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        values.update(cursor_at=cursor.at, cursor_id=cursor.id)
    statement = _tasks_statement(sql, task_filter.status, after=page.cursor is not None)
    rows = await db.fetch(statement, **values)
    return page_of(
        rows,
        page.limit,
        envelope_from_row,
        lambda row: KeysetCursor.after(scope, row["listed_at"], row["id"]).encode(),
    )


async def audit_page(
    db: Database, sql: Queries, audit_filter: AuditFilter | None, page: Page
) -> tuple[list[AuditEntry], str | None]:
    """Audit entries matching ``audit_filter``, newest first."""
    f = audit_filter or AuditFilter()
    scope = audit_scope(audit_filter)
    values: dict[str, Any] = {
        "queue": text_column(f.queue),
        "action": text_column(f.action),
        "actor": text_column(f.actor),
        "after": f.after,
        "before": f.before,
        "limit": page.limit + 1,
    }
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        values.update(cursor_at=cursor.at, cursor_id=cursor.id)
    keyset = "{audit_keyset}" if page.cursor is not None else ""
    rows = await db.fetch(sql.load("list_audit", keyset=keyset), **values)
    return page_of(
        rows,
        page.limit,
        audit_from_row,
        lambda row: KeysetCursor.after(scope, row["time"], row["id"]).encode(),
    )
