"""How an envelope is laid out as a MongoDB document, and back.

Layout of one task document (collection ``<prefix>tasks``)::

    _id              the task id (ids are unique across queues: IDConflict)
    queue, status, handler_ref, priority, attempt_count, redrive_count
    attempts         [{number, outcome, error_type, error_message, traceback,
                       started_at, finished_at, worker_id}]
    created_at, next_attempt_at, lease_expires_at, claimed_at, completed_at,
    dead_lettered_at, cancelled_at
    claimed_by       the worker id of the current claim (IN_FLIGHT only)
    due              when the task may be claimed: next_attempt_at while PENDING,
                     lease_expires_at while IN_FLIGHT, null otherwise
    status_at        the status time: next_attempt_at (PENDING), lease_expires_at
                     (IN_FLIGHT), completed_at, dead_lettered_at, cancelled_at
    token            the current claim token (IN_FLIGHT only)
    resolved_token   the token of the claim that last resolved the task
    last_error_type  error_type of the last attempt (task and DLQ filters, DLQ groups)
    admission        the mark of the batch that inserted it (see ``_admission``)
    body             JSON text of everything storage never changes: payload, headers,
                     retry, format_version and any field this release does not know

Every time is an int64 of **microseconds since the Unix epoch (UTC)**. BSON dates hold only
milliseconds, and comparing them with ``$$NOW`` is not portable across MongoDB-protocol
servers; integers are exact, compare the same everywhere, and the server computes them from
its own clock as ``{$multiply: [{$toLong: "$$NOW"}, 1000]}``. The body is JSON text so that a
payload or unknown field survives whatever its keys or numbers (BSON cannot hold ``$``-keys
everywhere, NUL in keys, or integers beyond 64 bits).

Documents written by the previous release (no ``priority``, ``claimed_by``,
``cancelled_at``, ``status_at`` or ``last_error_type``) read back with the defaults;
``migrate`` fills in ``priority``, ``status_at`` and ``last_error_type`` so that they sort,
list and filter like new ones.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from rdq.errors import ValidationError
from rdq.spi import (
    Attempt,
    AuditEntry,
    Envelope,
    Status,
    envelope_from_builtins,
    envelope_to_builtins,
)

__all__ = [
    "STATUS_TIME_FIELDS",
    "TIME_FIELDS",
    "UndecodableDocument",
    "attempt_to_document",
    "audit_from_document",
    "audit_to_document",
    "due_of",
    "envelope_from_document",
    "envelope_to_document",
    "from_micros",
    "to_micros",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

TIME_FIELDS = (
    "created_at",
    "next_attempt_at",
    "lease_expires_at",
    "claimed_at",
    "completed_at",
    "dead_lettered_at",
    "cancelled_at",
)
"""Envelope times, stored top-level as microseconds."""

_TOP_LEVEL = frozenset(
    {
        "id",
        "queue",
        "handler_ref",
        "status",
        "priority",
        "attempt_count",
        "redrive_count",
        "attempts",
        "claimed_by",
        "corrupt",
    }
    | set(TIME_FIELDS)
)
_ATTEMPT_FIELDS = tuple(Attempt.__struct_fields__)
_ATTEMPT_TIMES = frozenset({"started_at", "finished_at"})
_json_decoder = msgspec.json.Decoder()


class UndecodableDocument(Exception):
    """A stored document this release cannot turn back into an envelope."""

    def __init__(self, task_id: object, reason: str) -> None:
        self.task_id = task_id
        self.reason = reason
        super().__init__(f"task {task_id!r} is stored in a form rdq cannot read: {reason}")


def to_micros(at: datetime | None) -> int | None:
    """``at`` as integer microseconds since the epoch (``None`` stays ``None``)."""
    if at is None:
        return None
    return (at - EPOCH) // _MICROSECOND


def from_micros(value: int | None) -> datetime | None:
    """The aware UTC datetime of ``value`` microseconds since the epoch."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"a time must be an integer of microseconds, not {type(value).__name__}")
    return EPOCH + timedelta(microseconds=value)


def attempt_to_document(attempt: Attempt) -> dict[str, Any]:
    """The stored form of one attempt record."""
    out: dict[str, Any] = {}
    for name in _ATTEMPT_FIELDS:
        value = getattr(attempt, name)
        if name in _ATTEMPT_TIMES:
            value = to_micros(value)
        elif name == "outcome":
            value = str(value)
        out[name] = value
    return out


def due_of(task: Envelope) -> datetime | None:
    """When a stored task may be claimed: its next attempt while PENDING, the end of its
    lease while IN_FLIGHT, never otherwise."""
    if task.status == Status.PENDING:
        return task.next_attempt_at
    if task.status == Status.IN_FLIGHT:
        return task.lease_expires_at
    return None


def envelope_to_document(task: Envelope) -> dict[str, Any]:
    """The stored form of ``task`` (see the module docstring), status and times as given,
    no claim token. ``enqueue`` overrides what the store owns; ``import_tasks`` stores it
    as it is."""
    builtins = envelope_to_builtins(task)
    body = {key: value for key, value in builtins.items() if key not in _TOP_LEVEL}
    try:
        body_text = msgspec.json.encode(body).decode("utf-8")
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"cannot be encoded: {exc}", field="envelope") from None
    doc: dict[str, Any] = {
        "_id": task.id,
        "queue": task.queue,
        "status": str(task.status),
        "handler_ref": task.handler_ref,
        "priority": task.priority,
        "attempt_count": task.attempt_count,
        "redrive_count": task.redrive_count,
        "attempts": [attempt_to_document(a) for a in task.attempts],
        "claimed_by": task.claimed_by,
    }
    for name in TIME_FIELDS:
        doc[name] = to_micros(getattr(task, name))
    doc["due"] = to_micros(due_of(task))
    doc["status_at"] = to_micros(getattr(task, STATUS_TIME_FIELDS[task.status]))
    doc["token"] = None
    doc["last_error_type"] = task.attempts[-1].error_type if task.attempts else None
    doc["body"] = body_text
    return doc


def envelope_from_document(doc: dict[str, Any], *, with_attempts: bool = True) -> Envelope:
    """Rebuild the envelope stored in ``doc``.

    Raises ``UndecodableDocument`` (naming the id) if the document is damaged or was written
    in a form this release cannot read."""
    task_id = doc.get("_id")
    try:
        obj = _json_decoder.decode(doc["body"])
        if not isinstance(obj, dict):
            raise TypeError("the body is not a JSON object")
        obj["id"] = task_id
        for name in ("queue", "handler_ref", "status", "attempt_count", "redrive_count"):
            obj[name] = doc[name]
        for name in ("priority", "claimed_by"):
            if doc.get(name) is not None:
                obj[name] = doc[name]
        for name in TIME_FIELDS:
            obj[name] = from_micros(doc.get(name))
        attempts = doc.get("attempts") if with_attempts else []
        if not isinstance(attempts, list):
            raise TypeError("attempts is not an array")
        obj["attempts"] = [_attempt_builtins(a) for a in attempts]
        return envelope_from_builtins(obj)
    except (KeyError, TypeError, ValueError, OverflowError, msgspec.DecodeError) as exc:
        # ValidationError is a ValueError: a field of the wrong type or value lands here too.
        reason = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise UndecodableDocument(task_id, reason) from exc


def _attempt_builtins(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise TypeError("an attempt is not an object")
    out = dict(raw)
    for name in _ATTEMPT_TIMES:
        out[name] = from_micros(out.get(name))
    return out


STATUS_TIME_FIELDS = {
    Status.PENDING: "next_attempt_at",
    Status.IN_FLIGHT: "lease_expires_at",
    Status.SUCCEEDED: "completed_at",
    Status.DEAD: "dead_lettered_at",
    Status.CANCELLED: "cancelled_at",
}
"""The envelope field that holds each status's time (``status_at`` copies it)."""


def audit_to_document(entry: AuditEntry, entry_id: str) -> dict[str, Any]:
    """The stored form of an audit entry (``time`` is stamped by the server); the selector
    is JSON text, like a task's body."""
    return {
        "_id": entry_id,
        "actor": entry.actor,
        "action": entry.action,
        "queue": entry.queue,
        "selector": msgspec.json.encode(entry.selector).decode("utf-8"),
        "count": entry.count,
        "reason": entry.reason,
        "error": entry.error,
    }


def audit_from_document(doc: dict[str, Any]) -> AuditEntry:
    """The audit entry stored in ``doc`` (written by ``audit_to_document``)."""
    try:
        selector = _json_decoder.decode(doc.get("selector") or "{}")
    except msgspec.DecodeError:
        selector = {"unreadable": doc.get("selector")}
    return AuditEntry(
        id=str(doc["_id"]),
        time=from_micros(doc.get("time")),
        actor=str(doc.get("actor")),
        action=str(doc.get("action")),
        queue=str(doc.get("queue")),
        selector=selector if isinstance(selector, dict) else {"unreadable": selector},
        count=int(doc.get("count") or 0),
        reason=doc.get("reason"),
        error=doc.get("error"),
    )
