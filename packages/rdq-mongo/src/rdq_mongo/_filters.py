"""The query filters of the store: which documents an operation reads, updates or deletes.

Every "now" is the server's clock in microseconds since the epoch (``NOW_US``); the client's
clock is never used for due-ness or leases. Values from the caller are compared as plain
values in query operators (never read as paths), and wrapped in ``$literal`` inside ``$expr``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rdq.spi import AuditFilter, DLQFilter, Selector, Status, TaskFilter
from rdq_mongo._codec import to_micros

__all__ = [
    "CLAIM_SORT",
    "DUE_FLOOR",
    "GROUP_SORT",
    "NOW_US",
    "STATUS_AT",
    "Scope",
    "after_key",
    "audit_filter",
    "cancellable",
    "claim_filter",
    "claim_one_filter",
    "claimed_with",
    "dead_filter",
    "finished_before",
    "group_read_filter",
    "is_number",
    "retry_now_filter",
    "selected_filter",
    "task_filter",
    "ungrouped_filter",
]

Document = dict[str, Any]

NOW_US: Document = {"$multiply": [{"$toLong": "$$NOW"}, 1000]}
"""The server's now, in microseconds since the epoch."""

STATUS_AT = "status_at"
"""The stored field that holds the task's status time (see ``rdq.spi.TaskFilter``): what
``list_tasks``, ``dlq_list`` and ``purge_succeeded`` order and bound by."""

CLAIM_SORT = [("priority", -1), ("due", 1)]
"""The order tasks are claimed in: highest priority first, oldest due first within one."""

GROUP_SORT = [("grp", 1), ("priority", -1), ("due", 1), ("_id", 1)]
"""The order of index ``rdq_claim_by_group`` after the queue and ``grp_for``: group by
group, each in strict claim order (ties by id)."""

DUE_FLOOR = -(2**63)
"""The least int64: ``due >= DUE_FLOOR`` holds for every task whose ``due`` is a number,
i.e. every live one (a resolution sets it null). It is the partial filter of
``rdq_claim_by_group``, so every query on that index states it."""

_LIVE = [Status.PENDING.value, Status.IN_FLIGHT.value]
_FINISHED = [Status.SUCCEEDED.value, Status.CANCELLED.value]
_NUMBER_TYPES = ["int", "long", "double", "decimal"]


def is_number(path: str) -> Document:
    """True when the stored value at ``path`` is a number (``$isNumber`` needs 4.4)."""
    return {"$in": [{"$type": path}, _NUMBER_TYPES]}


def claimed_with(task_id: str, token: str) -> Document:
    """The filter of a fenced update: the task, IN_FLIGHT under the claim of ``token``."""
    return {"_id": task_id, "token": token, "status": Status.IN_FLIGHT.value}


@dataclass(frozen=True)
class Scope:
    """Which due tasks a claim of a queue with control records may take, by their keys:
    none whose handler is in ``not_handlers`` or that has a key in ``not_keys`` (paused, or
    held back by a limit); with ``handler``, only that handler's; with ``keys``, only tasks
    that have all of them."""

    not_handlers: Collection[str] = ()
    not_keys: Collection[str] = ()
    handler: str | None = None
    keys: Collection[str] = ()

    def apply(self, found: Document) -> Document:
        if self.handler is not None:
            found["handler_ref"] = self.handler
        elif self.not_handlers:
            found["handler_ref"] = {"$nin": sorted(self.not_handlers)}
        keys: Document = {}
        if self.keys:
            keys["$all"] = sorted(self.keys)
        if self.not_keys:
            keys["$nin"] = sorted(self.not_keys)
        if keys:
            found["keys"] = keys
        return found


def claim_filter(queue: str, claimed: Sequence[str] = (), scope: Scope | None = None) -> Document:
    """Tasks of ``queue`` that are due by the server clock: PENDING with ``next_attempt_at``
    passed or IN_FLIGHT with the lease passed (``due`` holds whichever applies), except the
    ``claimed`` ids (those a batch already holds: a lease shorter than the batch may lapse
    before its end, and one call must not hand out a task twice), and only those of
    ``scope`` when given."""
    found: Document = {"queue": queue, "status": {"$in": _LIVE}}
    if claimed:
        found["_id"] = {"$nin": list(claimed)}
    if scope is not None:
        scope.apply(found)
    found["$expr"] = {"$lte": ["$due", NOW_US]}
    return found


def claim_one_filter(
    queue: str, task_id: str, due: int | float, scope: Scope | None = None
) -> Document:
    """Task ``task_id`` of ``queue`` (of ``scope`` when given) if it is still as a read found
    it due: PENDING or IN_FLIGHT with ``due`` unchanged. What a lease by id matches.

    ``due`` is the value that read found when it was at or before the server's now, so the
    task is still due; every lease, reclaim and extension moves ``due`` past the server's now
    (``claim_update``, ``extend_update``) and every resolution changes the status or ``due``,
    so a task leased since that read no longer matches: of racing claimants of one task
    exactly one leases it. An equality, not a comparison with ``$$NOW``, and ``_id`` first:
    the server finds the task by ``_id`` alone (SecantusDB plans by the first field it
    meets and scans for any ``$expr``)."""
    found: Document = {"_id": task_id, "queue": queue, "status": {"$in": _LIVE}, "due": due}
    return scope.apply(found) if scope is not None else found


def ungrouped_filter(queue: str, stamp: str) -> Document:
    """The live tasks of ``queue`` not grouped under the order of ``stamp`` (``grp_for``
    other than it, or absent): what a claim of that order groups before it reads (see
    ``_claims._order``). Bounded on ``rdq_claim_by_group`` (``grp_for`` on either side of
    ``stamp``), so the tasks already grouped cost no more than the index's ranges around
    them."""
    return {
        "queue": queue,
        "grp_for": {"$ne": stamp},
        "due": {"$gte": DUE_FLOOR},
        "status": {"$in": _LIVE},
    }


def group_read_filter(
    queue: str, stamp: str, now_us: int, claimed: Sequence[str] = (), scope: Scope | None = None
) -> Document:
    """The tasks of ``queue`` grouped under ``stamp`` that are due at ``now_us`` (PENDING or
    IN_FLIGHT, ``due`` at or before it: the tasks ``claim_filter`` finds, as of the server's
    ``now_us`` read by the claim), but the ``claimed`` ones, in ``scope``. The due time is a
    bound of the index, not an ``$expr``, so a read of a group stops after what it takes;
    the caller adds the group (and priority) it reads."""
    found: Document = {
        "queue": queue,
        "grp_for": stamp,
        "due": {"$gte": DUE_FLOOR, "$lte": now_us},
        "status": {"$in": _LIVE},
    }
    if claimed:
        found["_id"] = {"$nin": list(claimed)}
    return scope.apply(found) if scope is not None else found


def cancellable(queue: str, task_ids: Sequence[str]) -> Document:
    """The tasks of ``queue`` among ``task_ids`` that are still to run (PENDING or
    IN_FLIGHT)."""
    return {"_id": {"$in": list(task_ids)}, "queue": queue, "status": {"$in": _LIVE}}


def retry_now_filter(queue: str, task_ids: Sequence[str]) -> Document:
    """The PENDING tasks of ``queue`` among ``task_ids`` that are not due yet."""
    return {
        "_id": {"$in": list(task_ids)},
        "queue": queue,
        "status": Status.PENDING.value,
        "$expr": {"$and": [is_number("$next_attempt_at"), {"$gt": ["$next_attempt_at", NOW_US]}]},
    }


def finished_before(queue: str, older_than: datetime) -> Document:
    """The SUCCEEDED and CANCELLED tasks of ``queue`` whose status time is before
    ``older_than``."""
    return {
        "queue": queue,
        "status": {"$in": _FINISHED},
        STATUS_AT: {"$lt": to_micros(older_than)},
    }


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
        STATUS_AT, dlq_filter.dead_lettered_after, dlq_filter.dead_lettered_before
    )


def task_filter(queue: str, selected: TaskFilter) -> Document:
    """The tasks of ``queue`` that ``selected`` selects (one status)."""
    query: Document = {"queue": queue, "status": selected.status.value}
    if selected.handler_ref is not None:
        query["handler_ref"] = selected.handler_ref
    if selected.error_type is not None:
        query["last_error_type"] = selected.error_type
    window = _window(STATUS_AT, selected.after, selected.before)
    # A task whose status time is not a number (written by hand) cannot be paged by it.
    return query | (window or {STATUS_AT: {"$type": "number"}})


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
