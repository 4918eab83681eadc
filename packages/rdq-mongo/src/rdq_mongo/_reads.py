"""Reads that span many documents: keyset pages, queue snapshots, DLQ groups, the clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rdq.spi import DLQGroup, Stats, Status, group_order
from rdq_mongo import _queries as q
from rdq_mongo._codec import from_micros

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

    from rdq_mongo._connection import Connection, Document

__all__ = ["dlq_groups", "keyset_page", "queue_stats", "server_now"]


async def server_now(connection: Connection) -> datetime:
    """The server's clock, from its ``hello`` reply (millisecond precision, the precision of
    ``$$NOW``)."""
    reply = await connection.database.command("hello")
    local: datetime = reply["localTime"]
    return local if local.tzinfo is not None else local.replace(tzinfo=UTC)


async def keyset_page(
    collection: AsyncCollection[Document],
    query: Document,
    field: str,
    *,
    limit: int,
    after: tuple[int, str] | None,
    descending: bool = False,
    projection: Document | None = None,
) -> tuple[list[Document], bool]:
    """Up to ``limit`` documents of ``query`` in ``(field, _id)`` order after the key
    ``after``, and whether more follow."""
    if after is not None:
        query = q.after_key(query, field, after[0], after[1], descending=descending)
    direction = -1 if descending else 1
    found = collection.find(
        query,
        projection=projection,
        sort=[(field, direction), ("_id", direction)],
        limit=limit + 1,
    )
    docs = [doc async for doc in found]
    return docs[:limit], len(docs) > limit


async def queue_stats(connection: Connection, queue: str | None) -> list[Stats]:
    """The snapshot of one queue (always returned, even empty) or of every queue that holds
    a task, ordered by name."""
    as_of = await server_now(connection)
    counts: dict[str, dict[Status, int]] = {}
    oldest: dict[str, int] = {}
    async for row in await connection.tasks.aggregate(q.queue_counts_pipeline(queue)):
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
    async for row in await connection.tasks.aggregate(q.dlq_groups_pipeline(queue)):
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


def _time(value: object) -> datetime | None:
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return from_micros(value)
        except OverflowError:
            return None
    return None
