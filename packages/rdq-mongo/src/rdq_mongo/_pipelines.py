"""The filters and update pipelines of the store, computed by the server from ``$$NOW``.

Every "now" below is the server's clock in microseconds since the epoch (``NOW_US``); the
client's clock is never used for due-ness, leases or timestamps. Values that come from the
caller are wrapped in ``$literal`` so a string such as ``"$x"`` is never read as a path.
"""

from __future__ import annotations

from typing import Any

from rdq.spi import Status

__all__ = [
    "NOW_US",
    "claim_filter",
    "claim_update",
    "enqueue_upsert",
    "extend_update",
    "resolve_update",
]

Pipeline = list[dict[str, Any]]

NOW_US: dict[str, Any] = {"$multiply": [{"$toLong": "$$NOW"}, 1000]}
"""The server's now, in microseconds since the epoch."""

LEASE_EXPIRED_MESSAGE = "the lease expired before the attempt was resolved"


def claim_filter(queue: str) -> dict[str, Any]:
    """Tasks of ``queue`` that are due by the server clock: PENDING with ``next_attempt_at``
    passed or IN_FLIGHT with the lease passed (``due`` holds whichever applies)."""
    return {
        "queue": queue,
        "status": {"$in": [Status.PENDING.value, Status.IN_FLIGHT.value]},
        "$expr": {"$lte": ["$due", NOW_US]},
    }


def claim_update(token: str, lease_us: int) -> Pipeline:
    """Lease the matched task to ``token`` until now + ``lease_us``. Reclaiming an IN_FLIGHT
    task (a lost lease) appends a LEASE_EXPIRED attempt and counts it, in the same update."""
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


def resolve_update(attempt: dict[str, Any], token: str, changes: dict[str, Any]) -> Pipeline:
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


def enqueue_upsert(document: dict[str, Any], due_us: int | None, delay_us: int) -> Pipeline:
    """An upsert pipeline that inserts ``document`` (PENDING, created now, due at ``due_us``
    or now + ``delay_us``) when no task has its id, and leaves an existing task untouched."""
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
            },
        ]
    }
    # An upsert starts from {_id}; a document that already has a queue is an existing task.
    exists = {"$ne": [{"$type": "$queue"}, "missing"]}
    return [{"$replaceWith": {"$cond": [exists, "$$ROOT", fresh]}}]
