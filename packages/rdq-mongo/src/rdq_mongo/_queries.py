"""The filters, update pipelines and aggregations of the store, computed by the server from
``$$NOW``.

Every "now" below is the server's clock in microseconds since the epoch (``NOW_US``); the
client's clock is never used for due-ness, leases or timestamps. Values that come from the
caller are wrapped in ``$literal`` so a string such as ``"$x"`` is never read as a path.

Updates that compute from stored values (``$concatArrays`` on ``attempts``, ``$add`` on a
counter) first check the stored value's type and leave a value of the wrong type as it is:
a document edited by hand or written by a buggy producer never makes an update fail, and
its raw value stays for inspection (the codec reports it as corrupt).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rdq.spi import AuditFilter, DLQFilter, Selector, Status, TaskFilter
from rdq_mongo._codec import to_micros

__all__ = [
    "CLAIM_SORT",
    "COMPLETED",
    "NOW_US",
    "STATUS_AT",
    "after_key",
    "audit_filter",
    "audit_insert",
    "cancel_update",
    "claim_filter",
    "claim_update",
    "dead_filter",
    "dead_letter_changes",
    "dlq_groups_pipeline",
    "enqueue_fresh",
    "extend_update",
    "fence",
    "import_fresh",
    "queue_counts_pipeline",
    "redrive_update",
    "reschedule_changes",
    "resolve_update",
    "selected_filter",
    "task_filter",
    "upsert_unless_exists",
]

Document = dict[str, Any]
Pipeline = list[Document]

NOW_US: Document = {"$multiply": [{"$toLong": "$$NOW"}, 1000]}
"""The server's now, in microseconds since the epoch."""

STATUS_AT = "status_at"
"""The stored field that holds the task's status time (see ``rdq.spi.TaskFilter``): what
``list_tasks``, ``dlq_list`` and ``purge_succeeded`` order and bound by."""

CLAIM_SORT = [("priority", -1), ("due", 1)]
"""The order tasks are claimed in: highest priority first, oldest due first within one."""

_LIVE = [Status.PENDING.value, Status.IN_FLIGHT.value]
_NUMBER_TYPES = ["int", "long", "double", "decimal"]
_CLAIM_CLEARED: Document = {
    "lease_expires_at": None,
    "token": None,
    "claimed_at": None,
    "claimed_by": None,
}


def _is_number(path: str) -> Document:
    """True when the stored value at ``path`` is a number (``$isNumber`` needs 4.4)."""
    return {"$in": [{"$type": path}, _NUMBER_TYPES]}


def _plus_one(path: str) -> Document:
    """``path`` + 1, or the stored value unchanged when it is not a number."""
    return {"$cond": [_is_number(path), {"$add": [path, 1]}, path]}


def _appended(record: Any) -> Document:
    """``attempts`` with ``record`` appended, or unchanged when it is not an array."""
    return {
        "$cond": [
            {"$isArray": "$attempts"},
            {"$concatArrays": ["$attempts", [record]]},
            "$attempts",
        ]
    }


def _iso(path: str) -> Document:
    """The stored microseconds at ``path`` as an ISO 8601 text (millisecond precision)."""
    return {
        "$cond": [
            _is_number(path),
            {
                "$dateToString": {
                    "date": {"$toDate": {"$toLong": {"$divide": [path, 1000]}}},
                    "format": "%Y-%m-%dT%H:%M:%S.%LZ",
                }
            },
            "?",
        ]
    }


def fence(task_id: str, token: str) -> Document:
    """The filter of a fenced update: the task, claimed with ``token``."""
    return {"_id": task_id, "token": token, "status": Status.IN_FLIGHT.value}


def claim_filter(queue: str, claimed: Sequence[str] = ()) -> Document:
    """Tasks of ``queue`` that are due by the server clock: PENDING with ``next_attempt_at``
    passed or IN_FLIGHT with the lease passed (``due`` holds whichever applies), except the
    ``claimed`` ids (those a batch already holds: a lease shorter than the batch may lapse
    before its end, and one call must not hand out a task twice)."""
    found: Document = {"queue": queue, "status": {"$in": _LIVE}}
    if claimed:
        found["_id"] = {"$nin": list(claimed)}
    found["$expr"] = {"$lte": ["$due", NOW_US]}
    return found


def claim_update(token: str, lease_us: int, worker_id: str | None) -> Pipeline:
    """Lease the matched task to ``token`` until now + ``lease_us``, held by ``worker_id``.

    Reclaiming an IN_FLIGHT task (a lapsed lease) appends a LEASE_EXPIRED attempt naming
    the lapsed claim (its time and holder) and counts it, in the same update. A claimed task
    is no longer a batch's to undo (see ``_admission``)."""
    reclaim = {"$eq": ["$status", Status.IN_FLIGHT.value]}
    lost_attempt = {
        "number": {"$cond": [_is_number("$attempt_count"), {"$add": ["$attempt_count", 1]}, 1]},
        "outcome": {"$literal": "LEASE_EXPIRED"},
        "error_type": {"$literal": "LeaseExpired"},
        "error_message": {
            "$concat": [
                "the lease expired at ",
                _iso("$lease_expires_at"),
                " before the attempt was resolved",
            ]
        },
        "traceback": None,
        "started_at": {"$ifNull": ["$claimed_at", None]},
        "finished_at": NOW_US,
        "worker_id": {"$ifNull": ["$claimed_by", None]},
    }
    return [
        {
            "$set": {
                "attempts": {"$cond": [reclaim, _appended(lost_attempt), "$attempts"]},
                "attempt_count": {
                    "$cond": [reclaim, _plus_one("$attempt_count"), "$attempt_count"]
                },
                "last_error_type": {
                    "$cond": [reclaim, "LeaseExpired", {"$ifNull": ["$last_error_type", None]}]
                },
            }
        },
        {
            "$set": {
                "status": Status.IN_FLIGHT.value,
                "token": {"$literal": token},
                "claimed_at": NOW_US,
                "claimed_by": {"$literal": worker_id},
                "lease_expires_at": {"$add": [NOW_US, lease_us]},
                "due": {"$add": [NOW_US, lease_us]},
                "status_at": {"$add": [NOW_US, lease_us]},
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
                "status_at": {"$add": [NOW_US, lease_us]},
            }
        }
    ]


def resolve_update(attempt: Document, token: str, changes: Document) -> Pipeline:
    """Append ``attempt``, count it, end the claim of ``token`` (remembered as
    ``resolved_token``), and apply ``changes`` (expressions)."""
    return [
        {
            "$set": {
                "attempts": _appended({"$literal": attempt}),
                "attempt_count": _plus_one("$attempt_count"),
                "last_error_type": {"$literal": attempt.get("error_type")},
                "resolved_token": {"$literal": token},
                **_CLAIM_CLEARED,
                **changes,
            }
        }
    ]


def reschedule_changes(next_at_us: int | None) -> Document:
    return {
        "status": Status.PENDING.value,
        "next_attempt_at": {"$literal": next_at_us},
        "due": {"$literal": next_at_us},
        "status_at": {"$literal": next_at_us},
    }


COMPLETED: Document = {
    "status": Status.SUCCEEDED.value,
    "completed_at": NOW_US,
    "status_at": NOW_US,
    "due": None,
}
"""The changes ``complete`` makes besides appending the attempt and ending the claim."""


def dead_letter_changes() -> Document:
    return {
        "status": Status.DEAD.value,
        "dead_lettered_at": NOW_US,
        "status_at": NOW_US,
        "due": None,
    }


def cancel_update() -> Pipeline:
    """CANCELLED now, the lease, the token and the claim cleared."""
    return [
        {
            "$set": {
                "status": Status.CANCELLED.value,
                "cancelled_at": NOW_US,
                "status_at": NOW_US,
                "due": None,
                **_CLAIM_CLEARED,
            }
        }
    ]


def enqueue_fresh(document: Document, due_us: int | None, delay_us: int) -> Document:
    """The expression of a task ``enqueue`` stores: ``document`` PENDING, created now, due
    at ``due_us`` or now + ``delay_us``, every other store-owned field cleared."""
    due: Any = {"$literal": due_us} if due_us is not None else {"$add": [NOW_US, delay_us]}
    return {
        "$mergeObjects": [
            {"$literal": document},
            {
                "status": Status.PENDING.value,
                "created_at": NOW_US,
                "next_attempt_at": due,
                "due": due,
                "status_at": due,
                "lease_expires_at": None,
                "claimed_at": None,
                "claimed_by": None,
                "completed_at": None,
                "dead_lettered_at": None,
                "cancelled_at": None,
                "token": None,
            },
        ]
    }


def import_fresh(document: Document) -> Document:
    """The expression of a task ``import_tasks`` stores: ``document`` as it is."""
    return {"$literal": document}


def upsert_unless_exists(fresh: Document, queue: str, admission: str | None) -> Pipeline:
    """An upsert pipeline that stores ``fresh`` (with the batch mark ``admission``) when no
    task has its id, and otherwise changes nothing but this: a task of the same queue loses
    its ``admission`` mark.

    ``admission`` marks the tasks a batch inserts on a server without transactions, so that
    the batch can undo exactly those if it fails. A producer that finds such a task already
    there (same id and queue) was told it is stored, so it takes the mark away and the task
    is never undone under it."""
    marked = {"$mergeObjects": [fresh, {"admission": {"$literal": admission}}]}
    # An upsert starts from {_id}; a document that already has a queue is an existing task.
    exists = {"$ne": [{"$type": "$queue"}, "missing"]}
    vouched = {
        "$cond": [
            {
                "$and": [
                    {"$eq": ["$queue", {"$literal": queue}]},
                    {"$ne": [{"$ifNull": ["$admission", None]}, None]},
                ]
            },
            {"$mergeObjects": ["$$ROOT", {"admission": None}]},
            "$$ROOT",
        ]
    }
    return [{"$replaceWith": {"$cond": [exists, vouched, marked]}}]


def _window(field: str, after: Any, before: Any) -> Document:
    window: Document = {}
    if after is not None:
        window["$gte"] = to_micros(after)
    if before is not None:
        window["$lt"] = to_micros(before)
    return {field: window} if window else {}


def dead_filter(queue: str, dlq_filter: DLQFilter | None) -> Document:
    """The DEAD tasks of ``queue`` that ``dlq_filter`` selects."""
    query: Document = {"queue": queue, "status": Status.DEAD.value}
    if dlq_filter is None:
        return query
    if dlq_filter.handler_ref is not None:
        query["handler_ref"] = dlq_filter.handler_ref
    if dlq_filter.error_type is not None:
        query["last_error_type"] = dlq_filter.error_type
    return query | _window(
        "status_at", dlq_filter.dead_lettered_after, dlq_filter.dead_lettered_before
    )


def task_filter(queue: str, selected: TaskFilter) -> Document:
    """The tasks of ``queue`` that ``selected`` selects (one status)."""
    query: Document = {"queue": queue, "status": selected.status.value}
    if selected.handler_ref is not None:
        query["handler_ref"] = selected.handler_ref
    if selected.error_type is not None:
        query["last_error_type"] = selected.error_type
    window = _window("status_at", selected.after, selected.before)
    # A task whose status time is not a number (written by hand) cannot be paged by it.
    return query | (window or {"status_at": {"$type": "number"}})


def after_key(
    query: Document, field: str, at_us: int, last_id: str, *, descending: bool
) -> Document:
    """``query`` restricted to what comes after ``(at_us, last_id)`` in ``(field, _id)``
    order (ascending unless ``descending``)."""
    beyond = "$lt" if descending else "$gt"
    return {
        "$and": [
            query,
            {"$or": [{field: {beyond: at_us}}, {field: at_us, "_id": {beyond: last_id}}]},
        ]
    }


def selected_filter(queue: str, selector: Selector, *, by_ids: tuple[Status, ...]) -> Document:
    """The tasks of ``queue`` a redrive or purge selects: by ids, those in a status of
    ``by_ids``; by filter, the DEAD ones that match."""
    if selector.ids is not None:
        return {
            "queue": queue,
            "status": {"$in": [status.value for status in by_ids]},
            "_id": {"$in": list(dict.fromkeys(selector.ids))},
        }
    return dead_filter(queue, selector.filter)


def redrive_update() -> Pipeline:
    return [
        {
            "$set": {
                "status": Status.PENDING.value,
                "attempt_count": 0,
                "redrive_count": _plus_one("$redrive_count"),
                "next_attempt_at": NOW_US,
                "due": NOW_US,
                "status_at": NOW_US,
                "dead_lettered_at": None,
            }
        }
    ]


def queue_counts_pipeline(queue: str | None) -> Pipeline:
    """Counts by queue and status and, for PENDING, the age (microseconds) of the task due
    the longest; one queue or every queue."""
    pending_due = {
        "$and": [
            {"$eq": ["$status", Status.PENDING.value]},
            _is_number("$due"),
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


def dlq_groups_pipeline(queue: str) -> Pipeline:
    """The DEAD tasks of ``queue`` counted by ``(handler_ref, last error type)`` with the
    first and last dead-lettering time."""
    at = {"$cond": [_is_number("$dead_lettered_at"), "$dead_lettered_at", None]}
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


def audit_insert(document: Document) -> Pipeline:
    """An upsert pipeline that stores the audit ``document`` stamped with the server's now."""
    return [{"$replaceWith": {"$mergeObjects": [{"$literal": document}, {"time": NOW_US}]}}]


def audit_filter(selected: AuditFilter | None) -> Document:
    """The audit entries ``selected`` selects (all of them for ``None``)."""
    if selected is None:
        return {}
    query: Document = {
        name: value
        for name in ("queue", "action", "actor")
        if (value := getattr(selected, name)) is not None
    }
    return query | _window("time", selected.after, selected.before)
