"""The memory store's listings: DLQ pages and groups, task pages by status, audit pages —
keyset pages in the contract's order, cut by :func:`rdq.spi.page_of` (arguments already
checked by the store)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from datetime import datetime
from typing import TypeVar

from rdq.spi import (
    AuditEntry,
    AuditFilter,
    DLQCursor,
    DLQFilter,
    DLQGroup,
    Envelope,
    KeysetCursor,
    Page,
    TaskFilter,
    audit_scope,
    group_order,
    page_of,
    status_time,
    task_scope,
)
from rdq_memory._codec import read
from rdq_memory._state import MemoryState, Record

__all__ = ["audit_page", "dlq_groups", "dlq_page", "task_page"]

T = TypeVar("T")
Key = tuple[datetime, str]


def _after(
    keyed: Iterable[tuple[Key, T]], after: Key | None, limit: int, *, descending: bool = False
) -> list[tuple[Key, T]]:
    """Up to ``limit + 1`` rows whose key comes after ``after`` in key order (descending when
    asked): what a database's ``WHERE key > $cursor ORDER BY key LIMIT limit + 1`` returns."""
    if descending:
        rows = (row for row in keyed if after is None or row[0] < after)
        return heapq.nlargest(limit + 1, rows, key=lambda row: row[0])
    rows = (row for row in keyed if after is None or row[0] > after)
    return heapq.nsmallest(limit + 1, rows, key=lambda row: row[0])


def dlq_page(
    state: MemoryState, queue: str, dlq_filter: DLQFilter | None, page: Page
) -> tuple[list[Envelope], str | None]:
    """DEAD tasks of ``queue`` by (dead_lettered_at, id), and the next cursor."""
    after: Key | None = None
    if page.cursor is not None:
        cursor = DLQCursor.decode(page.cursor, queue, dlq_filter)
        after = (cursor.dead_lettered_at, cursor.id)
    with state.lock:
        records = (state.tasks[key[1]] for key in state.index(queue).dlq)
        keyed = (
            ((r.task.dead_lettered_at, r.task.id), r)
            for r in records
            if r.task.dead_lettered_at is not None
            and (dlq_filter is None or dlq_filter.matches(r.task))
        )
        return page_of(
            _after(keyed, after, page.limit),
            page.limit,
            lambda row: read(row[1], include_attempts=page.include_attempts),
            lambda row: DLQCursor.after(queue, dlq_filter, *row[0]).encode(),
        )


def dlq_groups(state: MemoryState, queue: str) -> list[DLQGroup]:
    """The DLQ of ``queue`` counted by (handler_ref, error type of the last attempt)."""
    groups: dict[tuple[str, str | None], list[datetime]] = {}
    with state.lock:
        for at, task_id in state.index(queue).dlq:
            task = state.tasks[task_id].task
            error_type = task.attempts[-1].error_type if task.attempts else None
            groups.setdefault((task.handler_ref, error_type), []).append(at)
    out = [
        DLQGroup(
            handler_ref=handler_ref,
            error_type=error_type,
            count=len(times),
            first_dead_lettered_at=min(times),
            last_dead_lettered_at=max(times),
        )
        for (handler_ref, error_type), times in groups.items()
    ]
    return sorted(out, key=group_order)


def task_page(
    state: MemoryState, queue: str, task_filter: TaskFilter, page: Page
) -> tuple[list[Envelope], str | None]:
    """Tasks of ``queue`` in the filter's status by (status time, id), and the next cursor."""
    scope = task_scope(queue, task_filter)
    after: Key | None = None
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        after = (cursor.at, cursor.id)
    with state.lock:
        keyed: list[tuple[Key, Record]] = []
        for record in state.of_queue(queue):
            at = status_time(record.task)
            if at is not None and task_filter.matches(record.task):
                keyed.append(((at, record.task.id), record))
        return page_of(
            _after(keyed, after, page.limit),
            page.limit,
            lambda row: read(row[1], include_attempts=page.include_attempts),
            lambda row: KeysetCursor.after(scope, *row[0]).encode(),
        )


def audit_page(
    state: MemoryState, audit_filter: AuditFilter | None, page: Page
) -> tuple[list[AuditEntry], str | None]:
    """One page of entries matching ``audit_filter``, newest first, and the next cursor."""
    scope = audit_scope(audit_filter)
    after: Key | None = None
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        after = (cursor.at, cursor.id)
    with state.lock:
        keyed = [
            ((e.time, e.id), e)
            for e in state.audit
            if e.time is not None
            and e.id is not None
            and (audit_filter is None or audit_filter.matches(e))
        ]
    return page_of(
        _after(keyed, after, page.limit, descending=True),
        page.limit,
        lambda row: row[1],
        lambda row: KeysetCursor.after(scope, *row[0]).encode(),
    )
