"""``migrate``: the indexes of rdq's collections (idempotent; concurrent runs are harmless,
as ``createIndexes`` of an index that exists with the same definition is a no-op)."""

from __future__ import annotations

from pymongo import ASCENDING, IndexModel

from rdq_mongo._connection import Connection

__all__ = ["TASK_INDEXES", "migrate"]

TASK_INDEXES = [
    IndexModel(
        [("queue", ASCENDING), ("status", ASCENDING), ("due", ASCENDING)],
        name="rdq_claim",
    ),
    IndexModel(
        [
            ("queue", ASCENDING),
            ("status", ASCENDING),
            ("dead_lettered_at", ASCENDING),
            ("_id", ASCENDING),
        ],
        name="rdq_dlq",
    ),
    IndexModel(
        [("queue", ASCENDING), ("status", ASCENDING), ("completed_at", ASCENDING)],
        name="rdq_succeeded",
    ),
]
"""The indexes of the tasks collection (``_id`` is unique by itself)."""


async def migrate(connection: Connection) -> None:
    """Create the indexes rdq's queries rely on. Driver errors propagate."""
    await connection.tasks.create_indexes(TASK_INDEXES)
