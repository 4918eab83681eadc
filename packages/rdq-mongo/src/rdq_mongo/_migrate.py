"""``migrate``: the indexes of rdq's collections, and the upgrade of documents written by the
previous release.

Idempotent, and harmless when several processes run it at once: ``createIndexes`` of an
index that exists with the same definition is a no-op, dropping an index that is already
gone is ignored, and the upgrade only touches documents that lack the new fields.
"""

from __future__ import annotations

from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.errors import OperationFailure

from rdq.spi import STATUS_TIME_FIELDS
from rdq_mongo._connection import Connection

__all__ = ["AUDIT_INDEXES", "OLD_INDEXES", "TASK_INDEXES", "migrate"]

TASK_INDEXES = [
    IndexModel(
        [("queue", ASCENDING), ("status", ASCENDING), ("priority", DESCENDING), ("due", ASCENDING)],
        name="rdq_claim_by_priority",
    ),
    IndexModel(
        [("queue", ASCENDING), ("status", ASCENDING), ("status_at", ASCENDING), ("_id", ASCENDING)],
        name="rdq_by_status_time",
    ),
]
"""The indexes of the tasks collection (``_id`` is unique by itself)."""

AUDIT_INDEXES = [
    # Ascending, though list_audit reads newest first: a server walks an index backwards as
    # well as forwards, and SecantusDB 0.7.0b3 drops the boundary of a range on a descending
    # key that follows an equality prefix.
    IndexModel([("time", ASCENDING), ("_id", ASCENDING)], name="rdq_audit_time"),
    IndexModel(
        [("queue", ASCENDING), ("time", ASCENDING), ("_id", ASCENDING)],
        name="rdq_audit_queue_time",
    ),
]

OLD_INDEXES = ("rdq_claim", "rdq_dlq", "rdq_succeeded")
"""Indexes of the previous release, replaced by the ones above."""

_INDEX_NOT_FOUND = 27
_STATUS_AT = {
    "$switch": {
        "branches": [
            {"case": {"$eq": ["$status", status.value]}, "then": {"$ifNull": [f"${field}", None]}}
            for status, field in STATUS_TIME_FIELDS.items()
        ],
        "default": None,
    }
}
_LAST_ERROR_TYPE = {
    "$cond": [
        {"$isArray": "$attempts"},
        {
            "$let": {
                "vars": {"last": {"$arrayElemAt": ["$attempts", -1]}},
                "in": {"$ifNull": ["$$last.error_type", None]},
            }
        },
        None,
    ]
}


async def migrate(connection: Connection) -> list[str]:
    """Create the indexes, drop the previous release's, and give its documents the fields
    the new queries rely on (``priority`` 0, ``status_at`` and ``last_error_type`` from the
    fields they copy). Returns the steps that changed something, in order (``[]`` when all
    was up to date; with concurrent runs, a step may be named by more than one).
    Driver errors propagate."""
    tasks = connection.tasks
    steps: list[str] = []
    for collection, indexes in ((tasks, TASK_INDEXES), (connection.audit, AUDIT_INDEXES)):
        before = {index["name"] async for index in await collection.list_indexes()}
        # Every index is created, existing ones too: one whose definition changed under the
        # same name fails loudly instead of staying as it was.
        await collection.create_indexes(indexes)
        steps += [
            f"create index {collection.name}.{name}"
            for name in (index.document["name"] for index in indexes)
            if name not in before
        ]
    upgrades = (
        ("priority", {"priority": {"$exists": False}}, {"$set": {"priority": 0}}),
        (
            "last_error_type",
            {"last_error_type": {"$exists": False}},
            [{"$set": {"last_error_type": _LAST_ERROR_TYPE}}],
        ),
        ("status_at", {"status_at": {"$exists": False}}, [{"$set": {"status_at": _STATUS_AT}}]),
    )
    for field, lacking, update in upgrades:
        result = await tasks.update_many(lacking, update)
        if result.modified_count:
            steps.append(f"set {field} on {result.modified_count} task(s) of the previous release")
    for name in OLD_INDEXES:
        try:
            await tasks.drop_index(name)
        except OperationFailure as exc:
            if exc.code != _INDEX_NOT_FOUND and "not found" not in str(exc):
                raise
        else:
            steps.append(f"drop index {tasks.name}.{name}")
    return steps
