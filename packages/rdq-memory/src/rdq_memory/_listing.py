"""The memory store's reads of many tasks: DLQ pages and groups, task pages by status (the
arguments already checked by the store). Pages are keyset pages in the contract's order."""

from __future__ import annotations

from datetime import datetime

from rdq.spi import (
    DLQCursor,
    DLQFilter,
    DLQGroup,
    Envelope,
    KeysetCursor,
    Page,
    TaskFilter,
    group_order,
    status_time,
    task_scope,
)
from rdq_memory._codec import read
from rdq_memory._paging import keyset_page
from rdq_memory._state import MemoryState, Record

__all__ = ["dlq_groups", "dlq_page", "task_page"]


def dlq_page(
    state: MemoryState, queue: str, dlq_filter: DLQFilter | None, page: Page
) -> tuple[list[Envelope], str | None]:
    """DEAD tasks of ``queue`` by (dead_lettered_at, id), and the next cursor."""
    after: tuple[datetime, str] | None = None
    if page.cursor is not None:
        cursor = DLQCursor.decode(page.cursor, queue, dlq_filter)
        after = (cursor.dead_lettered_at, cursor.id)
    with state.lock:
        records = (state.tasks[key[1]] for key in state.index(queue).dlq)
        keyed = [
            ((r.task.dead_lettered_at, r.task.id), r)
            for r in records
            if r.task.dead_lettered_at is not None
            and (dlq_filter is None or dlq_filter.matches(r.task))
        ]
        chunk, last = keyset_page(keyed, after, page.limit)
        out = [read(r, include_attempts=page.include_attempts) for r in chunk]
    if last is None:
        return out, None
    return out, DLQCursor.after(queue, dlq_filter, last[0], last[1]).encode()


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
    after = None
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        after = (cursor.at, cursor.id)
    with state.lock:
        keyed: list[tuple[tuple[datetime, str], Record]] = []
        for record in state.of_queue(queue):
            at = status_time(record.task)
            if at is not None and task_filter.matches(record.task):
                keyed.append(((at, record.task.id), record))
        chunk, last = keyset_page(keyed, after, page.limit)
        out = [read(r, include_attempts=page.include_attempts) for r in chunk]
    if last is None:
        return out, None
    return out, KeysetCursor.after(scope, last[0], last[1]).encode()
