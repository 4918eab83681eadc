"""``migrate``: rdq's collections and their indexes, and the upgrade of documents written by
earlier releases.

Idempotent, and harmless when several processes run it at once: creating a collection that
exists is ignored, ``createIndexes`` of an index that exists with the same definition is a
no-op, dropping an index that is already gone is ignored, and the upgrades only touch
documents that lack the new fields (each one compare-and-set on what it read).
"""

from __future__ import annotations

from typing import Any

import msgspec
from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.errors import CollectionInvalid, OperationFailure

from rdq.spi import QUEUE_KEY, STATUS_TIME_FIELDS, Status
from rdq_mongo._codec import group_stamp
from rdq_mongo._connection import Connection
from rdq_mongo._controls import group_tasks, order_in
from rdq_mongo._filters import DUE_FLOOR

__all__ = [
    "AUDIT_INDEXES",
    "COUNT_INDEXES",
    "OLD_INDEXES",
    "TASK_INDEXES",
    "WORKER_INDEXES",
    "migrate",
]

TASK_INDEXES = [
    # handler_ref last: it serves no bound and no sort, but a claim that leaves paused or
    # held-back handlers out ($nin) is decided on the index entries, without reading the
    # documents of a backlog it skips.
    IndexModel(
        [
            ("queue", ASCENDING),
            ("status", ASCENDING),
            ("priority", DESCENDING),
            ("due", ASCENDING),
            ("handler_ref", ASCENDING),
        ],
        name="rdq_claim_by_handler",
    ),
    # The live leases of each task key (concurrency limits, list_controls' in_use): only
    # IN_FLIGHT tasks that have keys are in it, so tasks without keys never pay for it.
    IndexModel(
        [("queue", ASCENDING), ("keys", ASCENDING), ("lease_expires_at", ASCENDING)],
        name="rdq_in_flight_by_key",
        partialFilterExpression={"status": Status.IN_FLIGHT.value, "keys": {"$exists": True}},
    ),
    IndexModel(
        [("queue", ASCENDING), ("status", ASCENDING), ("status_at", ASCENDING), ("_id", ASCENDING)],
        name="rdq_by_status_time",
    ),
    # The claims of a fair or aged queue (``_claims._order``): each group's due tasks in its
    # claim order, and the live tasks grouped under another order than the queue's. Only
    # the live tasks are in it (a resolution sets ``due`` null), those of strict queues too:
    # a task admitted under an order read just before it changed must be found by the claim
    # whatever its stamp (see ``_claims._order``).
    IndexModel(
        [
            ("queue", ASCENDING),
            ("grp_for", ASCENDING),
            ("grp", ASCENDING),
            ("priority", DESCENDING),
            ("due", ASCENDING),
            ("_id", ASCENDING),
        ],
        name="rdq_claim_by_group",
        partialFilterExpression={"due": {"$gte": DUE_FLOOR}},
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

WORKER_INDEXES = [IndexModel([("seen_at", ASCENDING)], name="rdq_workers_seen")]

COUNT_INDEXES = [
    IndexModel([("queue", ASCENDING), ("minute", ASCENDING)], name="rdq_counts_queue_minute"),
    IndexModel([("minute", ASCENDING)], name="rdq_counts_minute"),
]
"""The counts are found by ``_id`` (``"<queue> <minute>"``) when added to; these serve
``read_counts`` (one queue or all, by queue then minute) and ``purge_counts``."""

OLD_INDEXES = ("rdq_claim", "rdq_dlq", "rdq_succeeded", "rdq_claim_by_priority")
"""Indexes of earlier releases, replaced by the ones above (``rdq_claim_by_priority`` by
``rdq_claim_by_handler``, which is the same with ``handler_ref`` at its end)."""

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
    """Create the collections and their indexes, give documents of earlier releases the
    fields the new queries rely on (``priority`` 0, ``status_at`` and ``last_error_type``
    from the fields they copy, ``keys`` out of the body, the group of each live task of a
    fair or aged queue), then drop the indexes the new ones replace. Returns the steps that
    changed something, in order (``[]`` when all was up to date; with concurrent runs, a
    step may be named by more than one). Driver errors propagate."""
    tasks = connection.tasks
    steps: list[str] = []
    existing = set(await connection.database.list_collection_names())
    every = (
        tasks,
        connection.audit,
        connection.controls,
        connection.workers,
        connection.counts,
        connection.dedup,
    )
    for collection in every:
        if collection.name in existing:
            continue
        try:
            await connection.database.create_collection(collection.name)
        except CollectionInvalid:  # another migrate created it meanwhile
            continue
        steps.append(f"create collection {collection.name}")
    for collection, indexes in (
        (tasks, TASK_INDEXES),
        (connection.audit, AUDIT_INDEXES),
        (connection.workers, WORKER_INDEXES),
        (connection.counts, COUNT_INDEXES),
    ):
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
    moved = await _move_keys_out_of_bodies(connection)
    if moved:
        steps.append(f"move keys out of the body of {moved} task(s)")
    grouped = await _group_ordered_queues(connection)
    if grouped:
        steps.append(f"group {grouped} live task(s) of fair or aged queues")
    for name in OLD_INDEXES:
        try:
            await tasks.drop_index(name)
        except OperationFailure as exc:
            if exc.code != _INDEX_NOT_FOUND and "not found" not in str(exc):
                raise
        else:
            steps.append(f"drop index {tasks.name}.{name}")
    return steps


async def _group_ordered_queues(connection: Connection) -> int:
    """Give the live tasks of every fair or aged queue their group under the queue's order
    (tasks stored before groups were kept, or grouped under an order since changed), so that
    the first claim after the upgrade does not: the claim would, exactly as this does
    (``_controls.group_tasks``)."""
    grouped = 0
    found = connection.controls.find(
        {"c.key": QUEUE_KEY}, projection={"c": {"$elemMatch": {"key": QUEUE_KEY}}}
    )
    async for doc in found:
        queue = str(doc["_id"])
        stamp = group_stamp(order_in(queue, doc))
        if stamp is not None:
            grouped += await group_tasks(connection, queue, stamp)
    return grouped


async def _move_keys_out_of_bodies(connection: Connection) -> int:
    """Give the tasks whose ``keys`` are still in their body (written before keys had a field
    of their own) the field ``keys`` (none when the list is empty), and take them out of the
    body. Each update is fenced on the body it read, so a concurrent change wins."""
    moved = 0
    candidates = connection.tasks.find(
        {"keys": {"$exists": False}, "body": {"$regex": '"keys":'}}, projection={"body": 1}
    )
    async for doc in candidates:
        body = doc.get("body")
        try:
            decoded: Any = msgspec.json.decode(body) if isinstance(body, str) else None
        except (msgspec.DecodeError, RecursionError):
            continue  # a corrupt body stays as it is (reads report it)
        if not isinstance(decoded, dict) or "keys" not in decoded:
            continue  # "keys" somewhere inside the payload, not the envelope's
        keys = decoded.pop("keys")
        change: dict[str, Any] = {"body": msgspec.json.encode(decoded).decode("utf-8")}
        if keys:
            change["keys"] = keys
        result = await connection.tasks.update_one(
            {"_id": doc["_id"], "body": body, "keys": {"$exists": False}}, {"$set": change}
        )
        moved += result.modified_count
    return moved
