"""The update pipelines of the store: what claiming, resolving, cancelling, redriving and
admitting write, computed by the server from ``$$NOW``.

Every "now" below is the server's clock in microseconds since the epoch (``NOW_US``); the
client's clock is never used for due-ness, leases or timestamps. Values that come from the
caller are wrapped in ``$literal`` so a string such as ``"$x"`` is never read as a path.

Updates that compute from stored values (``$concatArrays`` on ``attempts``, ``$add`` on a
counter) first check the stored value's type and leave a value of the wrong type as it is:
a document edited by hand or written by a buggy producer never makes an update fail, and
its raw value stays for inspection (the codec reports it as corrupt).
"""

from __future__ import annotations

from typing import Any

from rdq.spi import Status
from rdq_mongo._filters import NOW_US, is_number

__all__ = [
    "COMPLETED",
    "audit_insert",
    "cancel_update",
    "claim_update",
    "dead_letter_changes",
    "enqueue_fresh",
    "extend_update",
    "group_update",
    "import_fresh",
    "redrive_update",
    "reschedule_changes",
    "resolve_update",
    "retry_now_update",
    "upsert_unless_exists",
]

Document = dict[str, Any]
Pipeline = list[Document]

_CLAIM_CLEARED: Document = {
    "lease_expires_at": None,
    "token": None,
    "claimed_at": None,
    "claimed_by": None,
    "reservation": None,
}


def _plus_one(path: str) -> Document:
    """``path`` + 1, or the stored value unchanged when it is not a number."""
    return {"$cond": [is_number(path), {"$add": [path, 1]}, path]}


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
            is_number(path),
            {
                "$dateToString": {
                    "date": {"$toDate": {"$toLong": {"$divide": [path, 1000]}}},
                    "format": "%Y-%m-%dT%H:%M:%S.%LZ",
                }
            },
            "?",
        ]
    }


def claim_update(
    token: str, lease_us: int, worker_id: str | None, reservation: str | None = None
) -> Pipeline:
    """Lease the matched task to ``token`` until now + ``lease_us``, held by ``worker_id``,
    under the concurrency slots of take ``reservation`` (see ``_claims``) when a limit
    counts it.

    Reclaiming an IN_FLIGHT task (a lapsed lease) appends a LEASE_EXPIRED attempt naming
    the lapsed claim (its time and holder) and counts it, in the same update. A claimed task
    is no longer a batch's to undo (see ``_admission``)."""
    reclaim = {"$eq": ["$status", Status.IN_FLIGHT.value]}
    lost_attempt = {
        "number": {"$cond": [is_number("$attempt_count"), {"$add": ["$attempt_count", 1]}, 1]},
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
                "reservation": {"$literal": reservation},
                "lease_expires_at": {"$add": [NOW_US, lease_us]},
                "due": {"$add": [NOW_US, lease_us]},
                "status_at": {"$add": [NOW_US, lease_us]},
                "admission": None,
            }
        },
    ]


def group_update(stamp: str) -> Pipeline:
    """Group the matched tasks under the order of ``stamp`` (``_codec.group_stamp``):
    ``grp_for`` set to it and ``grp`` to the task's first key that starts with the fair
    prefix ``stamp`` (``""`` when none does, and for every task under aging alone, whose
    stamp is ``""``), as ``rdq.spi.fair_group`` computes it from what decodes of ``keys``."""
    if not stamp:
        group: Any = {"$literal": ""}
    else:
        keys = {"$cond": [{"$isArray": "$keys"}, "$keys", []]}
        starts = {
            "$cond": [
                {"$eq": [{"$type": "$$this"}, "string"]},
                {"$eq": [{"$substrCP": ["$$this", 0, len(stamp)]}, {"$literal": stamp}]},
                False,
            ]
        }
        first = {"$arrayElemAt": [{"$filter": {"input": keys, "cond": starts}}, 0]}
        group = {"$ifNull": [first, ""]}
    return [{"$set": {"grp_for": {"$literal": stamp}, "grp": group}}]


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


def retry_now_update() -> Pipeline:
    """Due now: ``next_attempt_at`` (and the due and status times that follow it) the
    server's now."""
    return [{"$set": {"next_attempt_at": NOW_US, "due": NOW_US, "status_at": NOW_US}}]


def audit_insert(document: Document) -> Pipeline:
    """An upsert pipeline that stores the audit ``document`` stamped with the server's now."""
    return [{"$replaceWith": {"$mergeObjects": [{"$literal": document}, {"time": NOW_US}]}}]
