"""The filters, update pipelines and aggregations of the store, computed by the server from
``$$NOW``.

Every "now" below is the server's clock in microseconds since the epoch (``NOW_US``); the
client's clock is never used for due-ness, leases or timestamps. Values that come from the
caller are wrapped in ``$literal`` so a string such as ``"$x"`` is never read as a path.
"""

from __future__ import annotations

from typing import Any

from rdq.spi import DLQFilter, Selector, Status
from rdq_mongo._codec import to_micros

__all__ = [
    "CLAIM_SORT",
    "COMPLETED",
    "DLQ_SORT",
    "NOW_US",
    "claim_filter",
    "claim_update",
    "dead_filter",
    "dead_letter_changes",
    "enqueue_upsert",
    "extend_update",
    "fence",
    "redrive_update",
    "reschedule_changes",
    "resolve_update",
    "selected_filter",
    "stats_pipeline",
]

Document = dict[str, Any]
Pipeline = list[Document]

NOW_US: Document = {"$multiply": [{"$toLong": "$$NOW"}, 1000]}
"""The server's now, in microseconds since the epoch."""

LEASE_EXPIRED_MESSAGE = "the lease expired before the attempt was resolved"

CLAIM_SORT = [("due", 1)]
"""The order tasks are claimed in: oldest due first."""
DLQ_SORT = [("dead_lettered_at", 1), ("_id", 1)]

COMPLETED: Document = {"status": Status.SUCCEEDED.value, "completed_at": NOW_US, "due": None}
"""The changes ``complete`` makes besides appending the attempt and ending the claim."""


def fence(task_id: str, token: str) -> Document:
    """The filter of a fenced update: the task, claimed with ``token``."""
    return {"_id": task_id, "token": token, "status": Status.IN_FLIGHT.value}


def claim_filter(queue: str) -> Document:
    """Tasks of ``queue`` that are due by the server clock: PENDING with ``next_attempt_at``
    passed or IN_FLIGHT with the lease passed (``due`` holds whichever applies)."""
    return {
        "queue": queue,
        "status": {"$in": [Status.PENDING.value, Status.IN_FLIGHT.value]},
        "$expr": {"$lte": ["$due", NOW_US]},
    }


def claim_update(token: str, lease_us: int) -> Pipeline:
    """Lease the matched task to ``token`` until now + ``lease_us``. Reclaiming an IN_FLIGHT
    task (a lost lease) appends a LEASE_EXPIRED attempt and counts it, in the same update.
    A claimed task is no longer a batch's to undo (see ``enqueue_upsert``)."""
    reclaim = {"$eq": ["$status", Status.IN_FLIGHT.value]}
    lost_attempt = {
        "number": {"$add": ["$attempt_count", 1]},
        "outcome": {"$literal": "LEASE_EXPIRED"},
        "error_type": {"$literal": "LeaseExpired"},
        "error_message": {"$literal": LEASE_EXPIRED_MESSAGE},
        "started_at": {"$ifNull": ["$claimed_at", None]},
        "finished_at": NOW_US,
        "worker_id": None,
    }
    return [
        {
            "$set": {
                "attempts": {
                    "$cond": [
                        reclaim,
                        {"$concatArrays": ["$attempts", [lost_attempt]]},
                        "$attempts",
                    ]
                },
                "attempt_count": {
                    "$cond": [reclaim, {"$add": ["$attempt_count", 1]}, "$attempt_count"]
                },
            }
        },
        {
            "$set": {
                "status": Status.IN_FLIGHT.value,
                "token": {"$literal": token},
                "claimed_at": NOW_US,
                "lease_expires_at": {"$add": [NOW_US, lease_us]},
                "due": {"$add": [NOW_US, lease_us]},
                "admission": None,
            }
        },
    ]


def extend_update(lease_us: int) -> Pipeline:
    """Move the lease (and so the due time) to now + ``lease_us``."""
    return [
        {
            "$set": {
                "lease_expires_at": {"$add": [NOW_US, lease_us]},
                "due": {"$add": [NOW_US, lease_us]},
            }
        }
    ]


def resolve_update(attempt: Document, token: str, changes: Document) -> Pipeline:
    """Append ``attempt``, count it, end the claim of ``token`` (remembered as
    ``resolved_token``), and apply ``changes`` (expressions)."""
    return [
        {
            "$set": {
                "attempts": {"$concatArrays": ["$attempts", [{"$literal": attempt}]]},
                "attempt_count": {"$add": ["$attempt_count", 1]},
                "lease_expires_at": None,
                "token": None,
                "resolved_token": {"$literal": token},
                "claimed_at": None,
                **changes,
            }
        }
    ]


def reschedule_changes(next_at_us: int | None) -> Document:
    return {
        "status": Status.PENDING.value,
        "next_attempt_at": {"$literal": next_at_us},
        "due": {"$literal": next_at_us},
    }


def dead_letter_changes(error_type: str | None) -> Document:
    return {
        "status": Status.DEAD.value,
        "dead_lettered_at": NOW_US,
        "dl_error_type": {"$literal": error_type},
        "due": None,
    }


def enqueue_upsert(
    document: Document, due_us: int | None, delay_us: int, admission: str | None = None
) -> Pipeline:
    """An upsert pipeline that inserts ``document`` (PENDING, created now, due at ``due_us``
    or now + ``delay_us``) when no task has its id, and otherwise changes nothing but this:
    a task of the same queue loses its ``admission`` mark.

    ``admission`` marks the tasks a batch inserts on a server without transactions, so that
    the batch can undo exactly those if it fails. A producer that finds such a task already
    there (same id and queue) was told it is stored, so it takes the mark away and the task
    is never undone under it."""
    due: Any = {"$literal": due_us} if due_us is not None else {"$add": [NOW_US, delay_us]}
    fresh = {
        "$mergeObjects": [
            {"$literal": document},
            {
                "status": Status.PENDING.value,
                "created_at": NOW_US,
                "next_attempt_at": due,
                "due": due,
                "lease_expires_at": None,
                "completed_at": None,
                "dead_lettered_at": None,
                "token": None,
                "claimed_at": None,
                "dl_error_type": None,
                "admission": {"$literal": admission},
            },
        ]
    }
    # An upsert starts from {_id}; a document that already has a queue is an existing task.
    exists = {"$ne": [{"$type": "$queue"}, "missing"]}
    vouched = {
        "$cond": [
            {
                "$and": [
                    {"$eq": ["$queue", {"$literal": document["queue"]}]},
                    {"$ne": [{"$ifNull": ["$admission", None]}, None]},
                ]
            },
            {"$mergeObjects": ["$$ROOT", {"admission": None}]},
            "$$ROOT",
        ]
    }
    return [{"$replaceWith": {"$cond": [exists, vouched, fresh]}}]


def dead_filter(queue: str, dlq_filter: DLQFilter | None) -> Document:
    """The DEAD tasks of ``queue`` that ``dlq_filter`` selects."""
    query: Document = {"queue": queue, "status": Status.DEAD.value}
    if dlq_filter is None:
        return query
    if dlq_filter.handler_ref is not None:
        query["handler_ref"] = dlq_filter.handler_ref
    if dlq_filter.error_type is not None:
        query["dl_error_type"] = dlq_filter.error_type
    window: Document = {}
    if dlq_filter.dead_lettered_after is not None:
        window["$gte"] = to_micros(dlq_filter.dead_lettered_after)
    if dlq_filter.dead_lettered_before is not None:
        window["$lt"] = to_micros(dlq_filter.dead_lettered_before)
    if window:
        query["dead_lettered_at"] = window
    return query


def selected_filter(queue: str, selector: Selector) -> Document:
    """The DEAD tasks of ``queue`` a redrive or purge selects."""
    if selector.ids is not None:
        return {
            "queue": queue,
            "status": Status.DEAD.value,
            "_id": {"$in": list(dict.fromkeys(selector.ids))},
        }
    return dead_filter(queue, selector.filter)


def redrive_update() -> Pipeline:
    return [
        {
            "$set": {
                "status": Status.PENDING.value,
                "attempt_count": 0,
                "redrive_count": {"$add": ["$redrive_count", 1]},
                "next_attempt_at": NOW_US,
                "due": NOW_US,
                "dead_lettered_at": None,
                "dl_error_type": None,
            }
        }
    ]


def stats_pipeline(queue: str) -> Pipeline:
    """Counts by status and, for PENDING, the age of the longest-due task (microseconds)."""
    pending_due = {
        "$and": [
            {"$eq": ["$status", Status.PENDING.value]},
            {"$lte": ["$due", NOW_US]},
        ]
    }
    return [
        {"$match": {"queue": queue}},
        {
            "$group": {
                "_id": "$status",
                "count": {"$sum": 1},
                "oldest_age": {
                    "$max": {"$cond": [pending_due, {"$subtract": [NOW_US, "$due"]}, None]}
                },
            }
        },
    ]
