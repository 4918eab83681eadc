"""How an envelope is laid out as a MongoDB document, and back.

Layout of one task document (collection ``<prefix>tasks``)::

    _id              the task id (ids are unique across queues: IDConflict)
    queue, status, handler_ref, priority, attempt_count, redrive_count
    attempts         [{number, outcome, error_type, error_message, traceback,
                       started_at, finished_at, worker_id}]
    created_at, next_attempt_at, lease_expires_at, claimed_at, completed_at,
    dead_lettered_at, cancelled_at
    claimed_by       the worker id of the current claim (IN_FLIGHT only)
    reservation      the take (a claim under concurrency limits) that reserved the slots
                     of the current lease: while its reservation stands, the lease is
                     counted in it, not as a lease (see ``_claims``); else null or absent
    keys             the task's flow-control keys (``Envelope.keys``), only when it has some:
                     a task without keys has no such field, so the index of the in-flight
                     tasks by key holds only tasks that have keys
    due              when the task may be claimed: next_attempt_at while PENDING,
                     lease_expires_at while IN_FLIGHT, null otherwise
    status_at        the status time: next_attempt_at (PENDING), lease_expires_at
                     (IN_FLIGHT), completed_at, dead_lettered_at, cancelled_at
    token            the current claim token (IN_FLIGHT only)
    resolved_token   the token of the claim that last resolved the task
    last_error_type  error_type of the last attempt (task and DLQ filters, DLQ groups)
    admission        the mark of the batch that inserted it (see ``_admission``)
    grp_for, grp     the claim order a live task was grouped under (``group_stamp``: the
                     fair prefix, ``""`` for aging alone) and its group in that order
                     (``rdq.spi.fair_group`` of its keys, ``""`` for none): what a claim of
                     a fair or aged queue reads by (index ``rdq_claim_by_group``). Written at
                     admission for a queue whose ``*`` record sets ``fair`` or ``aging``,
                     absent for the tasks of other queues, and rewritten by the claim for a
                     live task grouped under another order (see ``_claims._order``)
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
list and filter like new ones. A document whose keys are still in its body (written before
they had a field of their own) reads them from there until ``migrate`` moves them out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from rdq.errors import ValidationError
from rdq.spi import (
    NO_GROUP,
    STATUS_TIME_FIELDS,
    Attempt,
    AuditEntry,
    ClaimOrder,
    Envelope,
    Status,
    envelope_from_builtins,
    envelope_to_builtins,
    fair_group,
)

__all__ = [
    "NO_ATTEMPTS",
    "TIME_FIELDS",
    "attempt_to_document",
    "audit_from_document",
    "audit_to_document",
    "due_of",
    "envelope_from_document",
    "envelope_to_document",
    "from_micros",
    "group_fields",
    "group_stamp",
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
        "keys",
        "corrupt",
    }
    | set(TIME_FIELDS)
)
_ATTEMPT_FIELDS = tuple(Attempt.__struct_fields__)
_ATTEMPT_TIMES = frozenset({"started_at", "finished_at"})
_json_decoder = msgspec.json.Decoder()


NO_ATTEMPTS: dict[str, Any] = {"attempts": {"$slice": 0}}
"""The projection of a listing without attempts: none of the records, but an ``attempts``
that is not an array comes through as it is (so it is still reported corrupt)."""


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


def group_stamp(order: ClaimOrder) -> str | None:
    """What ``grp_for`` holds for tasks grouped under ``order``: its fair prefix, ``""`` for
    aging alone (no fair prefix is empty), ``None`` for the strict order (no group kept)."""
    if order.strict:
        return None
    return order.fair if order.fair is not None else ""


def group_fields(order: ClaimOrder, keys: Sequence[str]) -> dict[str, Any]:
    """The group fields of a task with ``keys`` in a queue of ``order`` (none for strict)."""
    stamp = group_stamp(order)
    if stamp is None:
        return {}
    return {"grp_for": stamp, "grp": fair_group(keys, stamp) if stamp else NO_GROUP}


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
    if task.keys:
        doc["keys"] = list(task.keys)
    for name in TIME_FIELDS:
        doc[name] = to_micros(getattr(task, name))
    doc["due"] = to_micros(due_of(task))
    doc["status_at"] = to_micros(getattr(task, STATUS_TIME_FIELDS[task.status]))
    doc["token"] = None
    doc["last_error_type"] = task.attempts[-1].error_type if task.attempts else None
    doc["body"] = body_text
    return doc


def envelope_from_document(doc: dict[str, Any]) -> Envelope:
    """Rebuild the envelope stored in ``doc``; never raises.

    A document that does not decode (edited by hand, written by a buggy producer) comes back
    with ``corrupt`` set: each field that did not decode is named with what is wrong and its
    raw stored value, and holds its default; the others (``id``, ``queue`` and ``status``
    always) are filled in. A listing without attempts reads them through ``NO_ATTEMPTS``:
    an ``attempts`` that is not an array still shows, malformed records inside one do
    not. JSON nested deeper than the decoder goes and times outside the years 1–9999 are
    reported the same way."""
    try:
        return _from_document(doc)
    except Exception as exc:  # a read never raises on a stored task
        task_id, queue, status = doc.get("_id"), doc.get("queue"), doc.get("status")
        return Envelope(
            id=task_id if isinstance(task_id, str) else str(task_id),
            queue=queue if isinstance(queue, str) else str(queue),
            handler_ref="",
            status=Status(status) if status in _STATUSES else Status.DEAD,
            corrupt=f"the stored task does not decode ({type(exc).__name__}: {exc})",
        )


def _from_document(doc: dict[str, Any]) -> Envelope:
    problems: list[str] = []
    raw: dict[str, Any] = {}
    obj: dict[str, Any] = {}

    def wrong(name: str, what: str, value: Any) -> None:
        problems.append(f"{name}: {what}; raw stored value: {_shown(value)}")

    body = doc.get("body")
    try:
        decoded = _json_decoder.decode(body) if isinstance(body, str | bytes) else None
    except msgspec.DecodeError as exc:
        wrong("body", f"not JSON ({exc})", body)
    except RecursionError:
        wrong("body", "JSON nested deeper than the decoder goes", body)
    else:
        if isinstance(decoded, dict):
            raw.update((key, value) for key, value in decoded.items() if key not in _TOP_LEVEL)
            if "keys" not in doc and "keys" in decoded:  # not yet moved out by migrate
                raw["keys"] = decoded["keys"]
        else:
            wrong("body", "not a JSON object", body)
    for name in ("handler_ref", "attempt_count", "redrive_count", "priority", "claimed_by", "keys"):
        if doc.get(name) is not None:
            raw[name] = doc[name]
    for name in TIME_FIELDS:
        value = doc.get(name)
        try:
            raw[name] = from_micros(value)
        except (TypeError, OverflowError):
            wrong(name, "not a time in integer microseconds", value)
    attempts = doc.get("attempts", [])
    if not isinstance(attempts, list):
        wrong("attempts", f"a {type(attempts).__name__}, not an array", attempts)
    else:
        try:
            raw["attempts"] = [_attempt_builtins(a) for a in attempts]
        except (TypeError, OverflowError) as exc:
            wrong("attempts", str(exc), attempts)
    obj.update(raw)
    obj["id"] = _text(doc.get("_id"), "id", wrong)
    obj["queue"] = _text(doc.get("queue"), "queue", wrong)
    status = doc.get("status")
    if status in _STATUSES:
        obj["status"] = status
    else:
        wrong("status", "not a status (read as DEAD)", status)
        obj["status"] = Status.DEAD.value
    if not isinstance(obj.get("handler_ref"), str):
        wrong("handler_ref", "not a string", doc.get("handler_ref"))
        obj["handler_ref"] = ""
    obj.pop("corrupt", None)
    # Drop what does not convert, one field at a time, naming each.
    for _ in range(len(obj) + 1):
        try:
            task = envelope_from_builtins(obj)
            break
        except ValidationError as exc:
            field = _top_field(exc.field)
            if field is None or field in _KEPT or field not in obj:
                task = _bare(obj)
                wrong(exc.field or "envelope", exc.message, raw)
                break
            wrong(field, exc.message, doc.get(field, raw.get(field)))
            del obj[field]
    else:  # pragma: no cover - every round removes a field, so the loop always breaks
        task = _bare(obj)
    if problems:
        task.corrupt = "; ".join(problems)
    return task


_STATUSES = frozenset(status.value for status in Status)
_KEPT = frozenset({"id", "queue", "status", "handler_ref"})
_SHOWN_CHARS = 2000


def _text(value: Any, name: str, wrong: Any) -> str:
    if isinstance(value, str):
        return value
    wrong(name, "not a string", value)
    return str(value)


def _top_field(path: str | None) -> str | None:
    """The top-level field of a dotted path such as ``attempts[0].number``."""
    if not path or path == "envelope":
        return None
    return path.split(".", 1)[0].split("[", 1)[0]


def _bare(obj: dict[str, Any]) -> Envelope:
    return Envelope(
        id=obj["id"], queue=obj["queue"], handler_ref=obj["handler_ref"], status=obj["status"]
    )


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except RecursionError:
        return "(a value nested too deeply to show)"
    if len(text) > _SHOWN_CHARS:
        return text[:_SHOWN_CHARS] + f"... ({len(text)} characters)"
    return text


def _attempt_builtins(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise TypeError(f"an attempt is a {type(raw).__name__}, not an object")
    out = dict(raw)
    for name in _ATTEMPT_TIMES:
        out[name] = from_micros(out.get(name))
    return out


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
