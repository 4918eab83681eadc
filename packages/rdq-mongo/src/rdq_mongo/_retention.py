"""What leaves the MongoDB store: ``expire_tasks``, the retention step, one ``delete_many``
of the listed finished tasks of a queue whose status time (``status_at``) is before the
cut-off; each document is deleted atomically, and a task redriven and dead-lettered again
since the engine read it has a later ``status_at`` and stays. And a claimed task completed by
deleting it (``complete`` with ``discard``): one ``delete_one`` fenced on the claim, as the
update of a kept completion is. A key whose task is gone is free (see ``_admission``), so
neither touches the dedup collection."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rdq.spi import Status
from rdq_mongo._codec import to_micros
from rdq_mongo._connection import Connection, Document
from rdq_mongo._filters import STATUS_AT, claimed_with

__all__ = ["discard_claimed", "expire_tasks", "expired_filter"]

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


async def discard_claimed(connection: Connection, task_id: str, token: str) -> bool | None:
    """Delete the task if ``token`` is its current claim: True if deleted, else whether it
    exists (False: stale claim; ``None``: no such task)."""
    result = await connection.tasks.delete_one(claimed_with(task_id, token))
    if result.deleted_count:
        return True
    exists = await connection.tasks.find_one({"_id": task_id}, projection={"_id": 1})
    return False if exists is not None else None
