"""Envelopes to statement arguments and result rows back to envelopes, losslessly.

Free-form fields (payload, headers, attempts, retry, unknown fields) are stored as ``json`` text
written by msgspec and decoded by msgspec, so a round trip returns exactly what was given.

A row that does not decode (written by hand or by a buggy producer in another language: JSON
of the wrong type or nested deeper than the decoder goes, a time outside the years 1–9999)
never makes a read raise: it becomes an envelope with ``corrupt`` set, naming each bad column
with its raw stored value, and the columns that did decode filled in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import msgspec

from rdq.errors import NotFound, StaleClaim, ValidationError
from rdq.spi import (
    Attempt,
    AuditEntry,
    Completion,
    DLQFilter,
    Envelope,
    RetryOverride,
    Stats,
    Status,
    bounds,
    envelope_from_builtins,
)
from rdq_postgres._times import FarTime

__all__ = [
    "ENQUEUE_ARRAYS",
    "ENQUEUE_FIELDS",
    "IMPORT_ARRAYS",
    "attempt_args",
    "audit_from_row",
    "audit_values",
    "completion_results",
    "encode_json",
    "enqueue_args",
    "envelope_from_row",
    "filter_values",
    "import_args",
    "json_object",
    "micros",
    "stats_from_row",
    "text_column",
]

_encoder = msgspec.json.Encoder()
_decode = msgspec.json.decode
_decode_headers = msgspec.json.Decoder(dict[str, str]).decode
_decode_attempts = msgspec.json.Decoder(list[Attempt]).decode
_decode_retry = msgspec.json.Decoder(RetryOverride).decode
_KNOWN = frozenset(f for f in Envelope.__struct_fields__ if f != "extra")
_COLUMNS = (
    "id",
    "queue",
    "handler_ref",
    "status",
    "attempt_count",
    "redrive_count",
    "created_at",
    "next_attempt_at",
    "lease_expires_at",
    "completed_at",
    "dead_lettered_at",
    "priority",
    "keys",
    "claimed_by",
    "claimed_at",
    "cancelled_at",
    "format_version",
)
_TIME_COLUMNS = (
    "created_at",
    "next_attempt_at",
    "lease_expires_at",
    "completed_at",
    "dead_lettered_at",
    "claimed_at",
    "cancelled_at",
)
_MICROSECOND = timedelta(microseconds=1)
KEY_SEPARATOR = "\x1f"
"""Between the keys of a task in a statement's argument (``chr(31)`` in the SQL)."""
_RAW_SHOWN = 2000
"""At most this many characters of a bad stored value are quoted in ``Envelope.corrupt``."""


def _json(value: Any) -> str:
    return _encoder.encode(value).decode()


encode_json = _json


def json_object(raw: str | None) -> dict[str, Any]:
    """A stored JSON object (``state``, ``extra``); ``{}`` for one that is not (a row written
    by hand)."""
    if raw is None:
        return {}
    try:
        value = _decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def micros(duration: timedelta | None) -> int:
    """A lease or delay as the statements take it: whole microseconds (``None``: 0). An elapsed
    time, never an ``interval`` with a day part, which PostgreSQL would add as a calendar day of
    the session's time zone (23 or 25 hours across a daylight-saving change)."""
    return 0 if duration is None else duration // _MICROSECOND


def text_column(value: str | None) -> str | None:
    """Text columns cannot hold NUL; the json columns keep the exact value."""
    return value.replace("\x00", "\ufffd") if value is not None else None


def _written(attempt: object, field: str) -> Attempt:
    """``attempt`` as a record is written: its times in UTC, which the encoder writes as RFC
    3339 with ``Z`` (``ValidationError`` naming a time that is not timezone-aware)."""
    if not isinstance(attempt, Attempt):
        raise ValidationError("must be an rdq.spi.Attempt", field=field)
    changes: dict[str, datetime] = {}
    for name in ("started_at", "finished_at"):
        at = getattr(attempt, name)
        if at is not None and bounds.check_aware(at, f"{field}.{name}").utcoffset():
            changes[name] = at.astimezone(UTC)
    return msgspec.structs.replace(attempt, **changes) if changes else attempt


def _attempts_json(attempts: Sequence[Attempt]) -> str:
    if not attempts:
        return "[]"
    return _json([_written(a, f"attempts[{i}]") for i, a in enumerate(attempts)])


def _check_offsets(attempts: Sequence[Attempt]) -> list[Attempt]:
    """``attempts`` as read, if every time in them has a UTC offset; ``ValueError`` (the row
    does not decode) for one without, which is no RFC 3339 timestamp."""
    for i, attempt in enumerate(attempts):
        for name in ("started_at", "finished_at"):
            at = getattr(attempt, name)
            if at is not None and at.utcoffset() is None:
                raise ValueError(f"attempts[{i}].{name} has no UTC offset")
    return list(attempts)


def _unknown(task: Envelope) -> dict[str, Any]:
    return {k: v for k, v in task.extra.items() if k not in _KNOWN}


# fmt: off
ENQUEUE_FIELDS = (
    "id", "queue", "handler_ref", "payload", "headers", "attempt_count", "redrive_count",
    "attempts", "error_type", "next_attempt_at", "retry", "format_version", "extra", "priority",
    "keys",
)
"""The parameters of enqueue.sql that :func:`enqueue_args` gives, in its order."""
ENQUEUE_ARRAYS = (
    "ids", "queues", "handler_refs", "payloads", "headers", "attempt_counts", "redrive_counts",
    "attempts", "error_types", "next_attempt_ats", "retries", "format_versions", "extras",
    "priorities", "keys",
)
"""The array parameters of enqueue_batch.sql and enqueue_in.sql: one per field of
:data:`ENQUEUE_FIELDS`, in its order."""
IMPORT_ARRAYS = (
    "ids", "queues", "handler_refs", "payloads", "headers", "statuses", "attempt_counts",
    "redrive_counts", "attempts", "error_types", "created_ats", "next_attempt_ats",
    "lease_expires_ats", "completed_ats", "dead_lettered_ats", "cancelled_ats", "retries",
    "priorities", "claimed_bys", "claimed_ats", "format_versions", "extras", "keys",
)
"""The array parameters of import_tasks.sql, in the order of :func:`import_args`."""
# fmt: on


def enqueue_args(task: Envelope, payload: str | None = None) -> tuple[Any, ...]:
    """The values of :data:`ENQUEUE_FIELDS` for ``task``, in order (``payload``: the payload
    already encoded as JSON, if it was)."""
    last_error = task.attempts[-1].error_type if task.attempts else None
    return (
        task.id,
        task.queue,
        task.handler_ref,
        _json(task.payload) if payload is None else payload,
        _json(task.headers),
        task.attempt_count,
        task.redrive_count,
        _attempts_json(task.attempts),
        text_column(last_error),
        task.next_attempt_at,
        None if task.retry is None else _json(task.retry),
        task.format_version,
        _json(_unknown(task)),
        task.priority,
        joined_keys(task.keys),
    )


def import_args(task: Envelope) -> tuple[Any, ...]:
    """Every stored field of ``task``, in the order of :data:`IMPORT_ARRAYS`."""
    last_error = task.attempts[-1].error_type if task.attempts else None
    return (
        task.id,
        task.queue,
        task.handler_ref,
        _json(task.payload),
        _json(task.headers),
        task.status.value,
        task.attempt_count,
        task.redrive_count,
        _attempts_json(task.attempts),
        text_column(last_error),
        task.created_at,
        task.next_attempt_at,
        task.lease_expires_at,
        task.completed_at,
        task.dead_lettered_at,
        task.cancelled_at,
        None if task.retry is None else _json(task.retry),
        task.priority,
        task.claimed_by,
        task.claimed_at,
        task.format_version,
        _json(_unknown(task)),
        joined_keys(task.keys),
    )


def joined_keys(keys: Sequence[str]) -> str:
    """A task's keys as the admission statements take them: joined by U+001F, a character no
    key holds (``""`` for none; the statements split them with ``string_to_array``)."""
    return KEY_SEPARATOR.join(keys)


def attempt_args(attempt: Attempt) -> tuple[str, str | None]:
    """The attempt record as JSON and its error type (for the DLQ filter column)."""
    return _json(_written(attempt, "attempt")), text_column(attempt.error_type)


def envelope_from_row(row: asyncpg.Record) -> Envelope:
    """Rebuild the envelope from a row of the task table; never raises.

    The common row (no unknown fields) is built directly, its JSON columns decoded straight
    into their types; anything else takes the general path, which keeps unknown fields and
    converts leniently (an attempt number written as text, say). A row that does not decode
    even so comes back with ``corrupt`` set (see :func:`_corrupt_envelope`)."""
    if row["quarantine"] is not None or any(type(row[c]) is FarTime for c in _TIME_COLUMNS):
        return _corrupt_envelope(row)
    if row["extra"] in (None, "{}"):
        try:
            return _envelope_from_typed_row(row)
        except Exception:  # RecursionError included; the general path decides
            pass
    try:
        return _envelope_from_builtins_row(row)
    except Exception:  # whatever fails to decode, the row is corrupt
        return _corrupt_envelope(row)


def _envelope_from_typed_row(row: asyncpg.Record) -> Envelope:
    attempts, retry = row["attempts"], row["retry"]
    return Envelope(
        id=row["id"],
        queue=row["queue"],
        handler_ref=row["handler_ref"],
        payload=_decode(row["payload"]),
        headers=_decode_headers(row["headers"]),
        status=Status(row["status"]),
        attempt_count=row["attempt_count"],
        redrive_count=row["redrive_count"],
        attempts=[] if attempts == "[]" else _check_offsets(_decode_attempts(attempts)),
        created_at=row["created_at"],
        next_attempt_at=row["next_attempt_at"],
        lease_expires_at=row["lease_expires_at"],
        completed_at=row["completed_at"],
        dead_lettered_at=row["dead_lettered_at"],
        retry=None if retry is None else _decode_retry(retry),
        priority=row["priority"],
        keys=row["keys"],
        claimed_by=row["claimed_by"],
        claimed_at=row["claimed_at"],
        cancelled_at=row["cancelled_at"],
        format_version=row["format_version"],
    )


def _envelope_from_builtins_row(row: asyncpg.Record) -> Envelope:
    extra = _decode(row["extra"]) if row["extra"] not in (None, "{}") else {}
    if not isinstance(extra, dict):
        raise ValidationError("must be a JSON object", field="extra")
    fields: dict[str, Any] = {k: v for k, v in extra.items() if k not in _KNOWN}
    for column in _COLUMNS:
        fields[column] = row[column]
    fields["payload"] = _decode(row["payload"])
    fields["headers"] = _decode(row["headers"])
    fields["attempts"] = _decode(row["attempts"])
    retry = row["retry"]
    fields["retry"] = None if retry is None else _decode(retry)
    task = envelope_from_builtins(fields)
    _check_offsets(task.attempts)
    return task


_JSON_COLUMNS: dict[str, Any] = {
    "payload": Any,
    "headers": dict[str, str],
    "attempts": list[Attempt],
    "retry": RetryOverride | None,
    "extra": dict[str, Any],
}


def _shown(raw: str) -> str:
    """``raw``, or its start when it is long."""
    return raw if len(raw) <= _RAW_SHOWN else f"{raw[:_RAW_SHOWN]}… ({len(raw)} characters)"


def _corrupt_envelope(row: asyncpg.Record) -> Envelope:
    """The envelope of a row that does not decode: ``id``, ``queue``, ``status`` and every
    typed column as stored, each JSON column that decodes into its type, defaults for the
    others, and ``corrupt`` naming each bad column with (the start of) its raw value, and each
    raw value kept in ``quarantine``. Never raises: should even that fail, the envelope holds
    just ``id``, ``queue``, ``status`` and ``corrupt``."""
    try:
        return _salvaged(row)
    except Exception as exc:  # a read never raises on a stored row
        return Envelope(
            id=row["id"],
            queue=row["queue"],
            handler_ref=row["handler_ref"],
            status=Status(row["status"]) if row["status"] in _STATUSES else Status.DEAD,
            corrupt=f"the stored task does not decode ({type(exc).__name__}: {exc})",
        )


_STATUSES = frozenset(Status)
_SALVAGED_APART = frozenset(("id", "queue", "handler_ref", "status", *_TIME_COLUMNS))


def _salvaged(row: asyncpg.Record) -> Envelope:
    problems: list[str] = []
    quarantine = row["quarantine"]
    if quarantine is not None:
        try:
            kept = msgspec.json.decode(quarantine, type=dict[str, msgspec.Raw])
        except msgspec.MsgspecError:
            kept = {"?": msgspec.Raw(quarantine.encode())}
        for column, raw_value in kept.items():
            problems.append(
                f"column {column} held a value it cannot hold, kept in column quarantine: "
                + _shown(bytes(raw_value).decode())
            )
    decoded: dict[str, Any] = {}
    for column, kind in _JSON_COLUMNS.items():
        raw = row[column]
        if raw is None:
            continue
        try:
            value = msgspec.convert(_decode(raw), kind, strict=False)
            if column == "attempts":
                _check_offsets(value)
            decoded[column] = value
        except RecursionError:
            problems.append(
                f"column {column} nests deeper than the decoder goes; stored: {_shown(raw)}"
            )
        except (msgspec.MsgspecError, ValueError, TypeError) as exc:
            problems.append(f"column {column} does not decode ({exc}); stored: {_shown(raw)}")
    times: dict[str, Any] = {}
    for column in _TIME_COLUMNS:
        at = row[column]
        if type(at) is FarTime:
            problems.append(f"column {column} holds {at.stored}, outside the years 1-9999")
            at = None
        times[column] = at
    try:
        status: Any = Status(row["status"])
    except ValueError:
        status = row["status"]
        problems.append(f"column status holds an unknown status: {status!r}")
    task = Envelope(
        id=row["id"],
        queue=row["queue"],
        handler_ref=row["handler_ref"],
        status=status,
        corrupt="; ".join(problems) or "the stored task does not decode",
        **{c: row[c] for c in _COLUMNS if c not in _SALVAGED_APART},
        **times,
    )
    for column, value in decoded.items():
        if column == "extra":
            task.extra = {k: v for k, v in value.items() if k not in _KNOWN}
        else:
            setattr(task, column, value)
    return task


def filter_values(dlq_filter: DLQFilter | None) -> dict[str, Any]:
    """The parameters of dlq_filter.part for a DLQ filter (``None``: any)."""
    f = dlq_filter or DLQFilter()
    return {
        "error_type": text_column(f.error_type),
        "handler_ref": f.handler_ref,
        "after": f.dead_lettered_after,
        "before": f.dead_lettered_before,
    }


_STATS_COLUMNS = (
    ("pending", "pending"),
    ("in_flight", "in_flight"),
    ("dead", "dlq_depth"),
    ("succeeded", "succeeded"),
    ("cancelled", "cancelled"),
)


def stats_from_row(row: asyncpg.Record, cap: int) -> Stats:
    """The ``Stats`` of a row of stats.sql: a count that reached ``cap`` (the
    exact-count threshold + 1) is replaced by the planner's estimate (at least ``cap``) and
    named in ``estimated``."""
    now: datetime = row["as_of"]
    oldest: datetime | None = row["oldest_due"]
    counts: dict[str, int] = {}
    estimated: list[str] = []
    for column, field in _STATS_COLUMNS:
        count: int = row[column]
        if count >= cap:
            count = max(cap, row[f"{column}_estimate"] or 0)
            estimated.append(field)
        counts[field] = count
    return Stats(
        queue=row["queue"],
        oldest_pending_age=None if oldest is None else max(0.0, (now - oldest).total_seconds()),
        as_of=now,
        estimated=tuple(estimated),
        **counts,
    )


def audit_values(entry: AuditEntry) -> dict[str, Any]:
    """The parameters of append_audit.sql."""
    return {
        "actor": text_column(entry.actor),
        "action": text_column(entry.action),
        "queue": entry.queue,
        "selector": _json(entry.selector),
        "count": entry.count,
        "reason": text_column(entry.reason),
        "error": text_column(entry.error),
    }


def audit_from_row(row: asyncpg.Record) -> AuditEntry:
    """An audit entry as stored (its selector decoded; ``{}`` if it does not decode)."""
    try:
        selector = _decode(row["selector"])
    except msgspec.MsgspecError:
        selector = {}
    return AuditEntry(
        id=row["id"],
        time=row["time"],
        actor=row["actor"],
        action=row["action"],
        queue=row["queue"],
        selector=selector if isinstance(selector, dict) else {"value": selector},
        count=row["count"],
        reason=row["reason"],
        error=row["error"],
    )


def completion_results(
    completions: Sequence[Completion], first: Mapping[str, Completion], row: asyncpg.Record
) -> list[StaleClaim | NotFound | None]:
    """Per completion, from complete_many.sql's ``done`` and ``found``: ``None`` if applied
    (only the item ``first`` holds for its id), else ``StaleClaim`` or ``NotFound``."""
    done = set(row["done"] or ())
    found = done.union(row["found"] or ())  # found is only looked up when some failed
    results: list[StaleClaim | NotFound | None] = []
    for item in completions:
        if item.task_id in done and first.get(item.task_id) is item:
            results.append(None)
        elif item.task_id in found:
            results.append(StaleClaim(item.task_id))
        else:
            results.append(NotFound(item.task_id))
    return results
