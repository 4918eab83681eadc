"""What leaves the MongoDB store: ``expire_tasks``, the retention step, one ``delete_many``
of the listed finished tasks of a queue whose status time (``status_at``) is before the
cut-off; each document is deleted atomically, and a task redriven and dead-lettered again
since the engine read it has a later ``status_at`` and stays."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rdq.spi import Status
from rdq_mongo._codec import to_micros
from rdq_mongo._connection import Connection, Document
from rdq_mongo._filters import STATUS_AT

__all__ = ["expire_tasks", "expired_filter"]

_FINISHED = [Status.DEAD.value, Status.SUCCEEDED.value, Status.CANCELLED.value]


def expired_filter(queue: str, ids: Sequence[str], before: datetime) -> Document:
    """The listed finished tasks of ``queue`` whose status time is before ``before``."""
    return {
        "_id": {"$in": list(ids)},
        "queue": queue,
        "status": {"$in": _FINISHED},
        STATUS_AT: {"$lt": to_micros(before)},
    }


async def expire_tasks(
    connection: Connection, queue: str, ids: Sequence[str], before: datetime
) -> int:
    """How many of the listed tasks were deleted."""
    result = await connection.tasks.delete_many(expired_filter(queue, ids, before))
    return int(result.deleted_count)
