"""The store's reads over many documents: the keyset listings (``dlq_list``, ``list_tasks``,
``list_audit``), cut by :func:`rdq.spi.page_of`, the DLQ groups, and the queue snapshots
(``stats``, ``list_queues``), counted by the server. Arguments are already checked by the
store; driver errors propagate (the store translates)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from rdq.errors import StorageError
from rdq.spi import (
    AuditEntry,
    AuditFilter,
    DLQCursor,
    DLQFilter,
    DLQGroup,
    Envelope,
    KeysetCursor,
    Page,
    Stats,
    Status,
    TaskFilter,
    audit_scope,
    group_order,
    page_of,
    task_scope,
)
from rdq_mongo._codec import (
    NO_ATTEMPTS,
    audit_from_document,
    envelope_from_document,
    from_micros,
    to_micros,
)
from rdq_mongo._connection import server_now
from rdq_mongo._filters import (
    NOW_US,
    STATUS_AT,
    after_key,
    audit_filter,
    dead_filter,
    is_number,
    task_filter,
)

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

    from rdq_mongo._connection import Connection, Document

__all__ = ["audit_page", "dlq_groups", "dlq_page", "queue_stats", "task_page"]

Pipeline = list[dict[str, Any]]


async def dlq_page(
    connection: Connection, queue: str, dlq_filter: DLQFilter | None, page: Page
) -> tuple[list[Envelope], str | None]:
    """DEAD tasks of ``queue`` by (dead-lettering time, id), and the next cursor."""
    after = None
    if page.cursor is not None:
        cursor = DLQCursor.decode(page.cursor, queue, dlq_filter)
        after = (_key_micros(cursor.dead_lettered_at), cursor.id)

    def next_cursor(doc: Document) -> str:
        return DLQCursor.after(queue, dlq_filter, *_task_key(doc)).encode()

    docs = await _keyset_rows(
        connection.tasks,
        dead_filter(queue, dlq_filter),
        STATUS_AT,
        limit=page.limit,
        after=after,
        projection=None if page.include_attempts else NO_ATTEMPTS,
    )
    return page_of(docs, page.limit, envelope_from_document, next_cursor)


async def task_page(
    connection: Connection, queue: str, selected: TaskFilter, page: Page
) -> tuple[list[Envelope], str | None]:
    """The tasks of ``queue`` in ``selected``'s status by (status time, id), and the next
    cursor."""
    scope = task_scope(queue, selected)
    after = None
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        after = (_key_micros(cursor.at), cursor.id)

    def next_cursor(doc: Document) -> str:
        return KeysetCursor.after(scope, *_task_key(doc)).encode()

    docs = await _keyset_rows(
        connection.tasks,
        task_filter(queue, selected),
        STATUS_AT,
        limit=page.limit,
        after=after,
        projection=None if page.include_attempts else NO_ATTEMPTS,
    )
    return page_of(docs, page.limit, envelope_from_document, next_cursor)


async def audit_page(
    connection: Connection, selected: AuditFilter | None, page: Page
) -> tuple[list[AuditEntry], str | None]:
    """Audit entries newest first by (time, id), and the next cursor."""
    scope = audit_scope(selected)
    after = None
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        after = (_key_micros(cursor.at), cursor.id)

    def next_cursor(doc: Document) -> str:
        entry = audit_from_document(doc)
        if entry.time is None or entry.id is None:
            raise StorageError(f"audit entry {doc.get('_id')!r} has no time")
        return KeysetCursor.after(scope, entry.time, entry.id).encode()

    docs = await _keyset_rows(
        connection.audit,
        audit_filter(selected),
        "time",
        limit=page.limit,
        after=after,
        descending=True,
    )
    return page_of(docs, page.limit, audit_from_document, next_cursor)


async def _keyset_rows(
    collection: AsyncCollection[Document],
    query: Document,
    field: str,
    *,
    limit: int,
    after: tuple[int, str] | None,
    descending: bool = False,
    projection: Document | None = None,
) -> list[Document]:
    """Up to ``limit + 1`` documents of ``query`` in ``(field, _id)`` order after the key
    ``after`` (the extra one tells :func:`~rdq.spi.page_of` that more follow)."""
    if after is not None:
        query = after_key(query, field, after[0], after[1], descending=descending)
    direction = -1 if descending else 1
    found = collection.find(
        query,
        projection=projection,
        sort=[(field, direction), ("_id", direction)],
        limit=limit + 1,
    )
    return [doc async for doc in found]


def _task_key(doc: Document) -> tuple[datetime, str]:
    """The keyset key of a listed task: its status time and its id."""
    at = from_micros(doc.get(STATUS_AT))
    if at is None:
        raise StorageError(f"task {doc.get('_id')!r} has no {STATUS_AT}")
    return at, str(doc["_id"])


def _key_micros(at: datetime) -> int:
    micros = to_micros(at)
    if micros is None:  # a decoded cursor always carries a time
        raise StorageError("a cursor without a time")
    return micros


# --- counted by the server ----------------------------------------------------------------


async def queue_stats(connection: Connection, queue: str | None) -> list[Stats]:
    """The snapshot of one queue (always returned, even empty) or of every queue that holds
    a task, ordered by name."""
    as_of = await server_now(connection)
    counts: dict[str, dict[Status, int]] = {}
    oldest: dict[str, int] = {}
    async for row in await connection.tasks.aggregate(_queue_counts_pipeline(queue)):
        name = row["_id"].get("queue")
        if not isinstance(name, str):
            continue  # a document without a usable queue name belongs to no queue
        per_status = counts.setdefault(name, dict.fromkeys(Status, 0))
        status = row["_id"].get("status")
        if status in per_status:
            per_status[Status(status)] += row["count"]
        age = row.get("oldest_age")
        if isinstance(age, int | float):
            oldest[name] = max(oldest.get(name, 0), max(0, int(age)))
    if queue is not None:
        counts.setdefault(queue, dict.fromkeys(Status, 0))
    return [
        Stats(
            queue=name,
            pending=per_status[Status.PENDING],
            in_flight=per_status[Status.IN_FLIGHT],
            dlq_depth=per_status[Status.DEAD],
            succeeded=per_status[Status.SUCCEEDED],
            cancelled=per_status[Status.CANCELLED],
            oldest_pending_age=oldest[name] / 1_000_000 if name in oldest else None,
            as_of=as_of,
        )
        for name, per_status in sorted(counts.items())
    ]


async def dlq_groups(connection: Connection, queue: str) -> list[DLQGroup]:
    """The DEAD tasks of ``queue`` grouped by ``(handler_ref, last error type)``, counted by
    the server."""
    groups: list[DLQGroup] = []
    fallback: datetime | None = None
    async for row in await connection.tasks.aggregate(_dlq_groups_pipeline(queue)):
        key: dict[str, Any] = row["_id"]
        first, last = _time(row.get("first")), _time(row.get("last"))
        if first is None or last is None:
            # Only a document edited by hand is DEAD without a dead-lettering time.
            fallback = fallback or await server_now(connection)
            first, last = first or fallback, last or fallback
        handler_ref = key.get("handler_ref")
        error_type = key.get("error_type")
        groups.append(
            DLQGroup(
                handler_ref=handler_ref if isinstance(handler_ref, str) else "",
                error_type=error_type if isinstance(error_type, str) else None,
                count=row["count"],
                first_dead_lettered_at=first,
                last_dead_lettered_at=last,
            )
        )
    groups.sort(key=group_order)
    return groups


def _queue_counts_pipeline(queue: str | None) -> Pipeline:
    """Counts by queue and status and, for PENDING, the age (microseconds) of the task due
    the longest; one queue or every queue."""
    pending_due = {
        "$and": [
            {"$eq": ["$status", Status.PENDING.value]},
            is_number("$due"),
            {"$lte": ["$due", NOW_US]},
        ]
    }
    match: Pipeline = [{"$match": {"queue": queue}}] if queue is not None else []
    return [
        *match,
        {
            "$group": {
                "_id": {"queue": "$queue", "status": "$status"},
                "count": {"$sum": 1},
                "oldest_age": {
                    "$max": {"$cond": [pending_due, {"$subtract": [NOW_US, "$due"]}, None]}
                },
            }
        },
    ]


def _dlq_groups_pipeline(queue: str) -> Pipeline:
    """The DEAD tasks of ``queue`` counted by ``(handler_ref, last error type)`` with the
    first and last dead-lettering time."""
    at = {"$cond": [is_number("$dead_lettered_at"), "$dead_lettered_at", None]}
    return [
        {"$match": {"queue": queue, "status": Status.DEAD.value}},
        {
            "$group": {
                "_id": {
                    "handler_ref": {"$ifNull": ["$handler_ref", None]},
                    "error_type": {"$ifNull": ["$last_error_type", None]},
                },
                "count": {"$sum": 1},
                "first": {"$min": at},
                "last": {"$max": at},
            }
        },
    ]


def _time(value: object) -> datetime | None:
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return from_micros(value)
        except OverflowError:
            return None
    return None
