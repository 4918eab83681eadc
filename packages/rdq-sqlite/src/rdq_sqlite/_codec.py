"""Rows of the task table to envelopes and back, losslessly, and the time columns.

Times are stored as integer microseconds since the epoch (UTC), so they sort, compare and
round-trip exactly. Free-form fields are JSON text written and read by msgspec. A row whose
JSON does not decode (of the wrong type, nested deeper than the decoder goes) or whose time
lies outside the years 1–9999 never raises here: it comes back as an envelope with ``corrupt``
set, naming each bad field and showing its stored value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from rdq.spi import Attempt, AuditEntry, DLQFilter, Envelope, RetryOverride, Status

__all__ = [
    "COLUMNS",
    "LISTED_COLUMNS",
    "at_us",
    "audit_from_row",
    "audit_id",
    "audit_params",
    "audit_seq",
    "decode_keys",
    "dlq_filter_params",
    "encode_attempt",
    "envelope_from_row",
    "filter_params",
    "from_us",
    "ids_param",
    "import_row",
    "json_text",
    "new_row",
    "to_us",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LOWEST = -(2**63)
_HIGHEST = 2**63 - 1
_US = timedelta(microseconds=1)
_KNOWN = frozenset(f for f in Envelope.__struct_fields__ if f != "extra")
_SHOWN = 300  # characters of a corrupt stored value shown in ``Envelope.corrupt``

COLUMNS = (
    "id, queue, handler_ref, status, priority, payload, headers, attempt_count, redrive_count, "
    "attempts, created_at, next_attempt_at, lease_expires_at, claimed_by, claimed_at, "
    "completed_at, dead_lettered_at, cancelled_at, retry, format_version, extra, keys"
)
"""The columns every statement that returns whole tasks selects, in this order."""
LISTED_COLUMNS = COLUMNS.replace(
    "attempts", "CASE WHEN :with_attempts THEN attempts ELSE '[]' END AS attempts"
)
"""``COLUMNS`` for listings, which carry attempts only when asked (``:with_attempts``)."""

_encode = msgspec.json.Encoder().encode
_decode_any = msgspec.json.Decoder().decode
_decode_headers = msgspec.json.Decoder(dict[str, str]).decode
_decode_attempts = msgspec.json.Decoder(list[Attempt]).decode
_decode_retry = msgspec.json.Decoder(RetryOverride | None).decode
_decode_extra = msgspec.json.Decoder(dict[str, Any]).decode
_decode_keys = msgspec.json.Decoder(list[str]).decode
_decode_object = msgspec.json.Decoder(dict[str, Any]).decode


def to_us(at: datetime | None) -> int | None:
    """An aware datetime as microseconds since the epoch (``None`` stays ``None``)."""
    return None if at is None else (at - _EPOCH) // _US


def from_us(us: int | None) -> datetime | None:
    """Microseconds since the epoch as an aware UTC datetime (``None`` stays ``None``)."""
    return None if us is None else _EPOCH + timedelta(microseconds=us)


def at_us(us: int) -> datetime:
    """Microseconds since the epoch as an aware UTC datetime."""
    return _EPOCH + timedelta(microseconds=us)


def json_text(value: Any) -> str:
    """``value`` as the JSON text a column holds."""
    return _json(value)


def _json(value: Any) -> str:
    return _encode(value).decode()


def ids_param(ids: Sequence[str]) -> str:
    """Task ids as one JSON array, the parameter statements read with ``json_each(:ids)``."""
    return _json(list(ids))


def encode_attempt(attempt: Attempt) -> str:
    return _json(attempt)


def _extra(task: Envelope) -> str:
    extra = {k: v for k, v in task.extra.items() if k not in _KNOWN} if task.extra else {}
    return _json(extra) if extra else "{}"


def _common(task: Envelope, payload: str | None) -> dict[str, Any]:
    return {
        "id": task.id,
        "queue": task.queue,
        "handler_ref": task.handler_ref,
        "priority": task.priority,
        "payload": _json(task.payload) if payload is None else payload,
        "headers": _json(task.headers) if task.headers else "{}",
        "attempt_count": task.attempt_count,
        "redrive_count": task.redrive_count,
        "attempts": _json(task.attempts) if task.attempts else "[]",
        "last_error_type": task.attempts[-1].error_type if task.attempts else None,
        "retry": None if task.retry is None else _json(task.retry),
        "format_version": task.format_version,
        "extra": _extra(task),
        "keys": _json(task.keys) if task.keys else "[]",
    }


def new_row(task: Envelope, payload: str | None, now: int, due: int) -> dict[str, Any]:
    """The parameters of ``enqueue.sql`` for a task admitted at ``now``, due at ``due``."""
    row = _common(task, payload)
    row["created_at"] = now
    row["next_attempt_at"] = due
    return row


def import_row(task: Envelope) -> dict[str, Any]:
    """The parameters of ``import.sql``: the task exactly as given, with no claim token."""
    row = _common(task, None)
    row.update(
        status=str(task.status),
        created_at=to_us(task.created_at),
        next_attempt_at=to_us(task.next_attempt_at),
        lease_expires_at=to_us(task.lease_expires_at),
        claimed_by=task.claimed_by,
        claimed_at=to_us(task.claimed_at),
        completed_at=to_us(task.completed_at),
        dead_lettered_at=to_us(task.dead_lettered_at),
        cancelled_at=to_us(task.cancelled_at),
    )
    return row


def filter_params(
    error_type: str | None, handler_ref: str | None, lo: int | None, hi: int | None
) -> dict[str, Any]:
    """The parameters of the ``{filter}`` fragment (``lo``/``hi``: microseconds or None)."""
    return {
        "error_type": error_type,
        "handler_ref": handler_ref,
        "lo": _LOWEST if lo is None else lo,
        "hi": _HIGHEST if hi is None else hi,
    }


def dlq_filter_params(dlq_filter: DLQFilter | None) -> dict[str, Any]:
    """The parameters of the ``{filter}`` fragment for a DLQ filter (``None``: every task)."""
    f = dlq_filter or DLQFilter()
    return filter_params(
        f.error_type, f.handler_ref, to_us(f.dead_lettered_after), to_us(f.dead_lettered_before)
    )


def envelope_from_row(row: Sequence[Any]) -> Envelope:
    """The envelope of a row selected with :data:`COLUMNS`; never raises on bad JSON."""
    try:
        task = Envelope(
            id=row[0],
            queue=row[1],
            handler_ref=row[2],
            status=Status(row[3]),
            priority=row[4],
            payload=_decode_any(row[5]),
            headers={} if row[6] == "{}" else _decode_headers(row[6]),
            attempt_count=row[7],
            redrive_count=row[8],
            attempts=[] if row[9] == "[]" else _decode_attempts(row[9]),
            created_at=from_us(row[10]),
            next_attempt_at=from_us(row[11]),
            lease_expires_at=from_us(row[12]),
            claimed_by=row[13],
            claimed_at=from_us(row[14]),
            completed_at=from_us(row[15]),
            dead_lettered_at=from_us(row[16]),
            cancelled_at=from_us(row[17]),
            retry=None if row[18] is None else _decode_retry(row[18]),
            format_version=row[19],
        )
        if row[20] != "{}":
            task.extra = _decode_extra(row[20])
        if row[21] != "[]":
            task.keys = _decode_keys(row[21])
    except Exception:  # whatever fails (RecursionError on deep JSON too), the row is corrupt
        return _corrupt_envelope(row)
    return task


_Decoder = Callable[[Any], Any]


def _field(problems: list[str], name: str, raw: Any, decode: _Decoder, default: Any) -> Any:
    try:
        return decode(raw)
    except Exception as exc:  # RecursionError included: a read never raises on a stored row
        shown = repr(raw)
        if len(shown) > _SHOWN:
            shown = shown[:_SHOWN] + "…"
        problems.append(f"{name}: {_reason(exc)}; stored value {shown}")
        return default


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nests deeper than the decoder goes"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _corrupt_envelope(row: Sequence[Any]) -> Envelope:
    """The row field by field: what decodes is filled in, the rest keeps its default, and
    ``corrupt`` names every field that did not decode."""
    problems: list[str] = []

    def field(name: str, index: int, decode: _Decoder, default: Any) -> Any:
        return _field(problems, name, row[index], decode, default)

    def time(name: str, index: int) -> datetime | None:
        at: datetime | None = field(name, index, from_us, None)
        return at

    task = Envelope(
        id=row[0],
        queue=row[1],
        handler_ref=field("handler_ref", 2, _text, ""),
        status=field("status", 3, Status, Status.PENDING),
        priority=field("priority", 4, _integer, 0),
        payload=field("payload", 5, _decode_any, None),
        headers=field("headers", 6, _decode_headers, {}),
        attempt_count=field("attempt_count", 7, _integer, 0),
        redrive_count=field("redrive_count", 8, _integer, 0),
        attempts=field("attempts", 9, _decode_attempts, []),
        created_at=time("created_at", 10),
        next_attempt_at=time("next_attempt_at", 11),
        lease_expires_at=time("lease_expires_at", 12),
        claimed_by=row[13],
        claimed_at=time("claimed_at", 14),
        completed_at=time("completed_at", 15),
        dead_lettered_at=time("dead_lettered_at", 16),
        cancelled_at=time("cancelled_at", 17),
        retry=None if row[18] is None else field("retry", 18, _decode_retry, None),
        format_version=field("format_version", 19, _integer, 1),
        extra=field("extra", 20, _decode_extra, {}),
        keys=field("keys", 21, _decode_keys, []),
    )
    task.corrupt = "; ".join(problems) or "the stored task does not decode"
    return task


def decode_keys(raw: Any) -> list[str]:
    """A task's stored ``keys`` column; a value that does not decode counts as no keys (the
    task is corrupt and claimed as such, its queue's and handler's controls still apply)."""
    if raw == "[]":
        return []
    try:
        return _decode_keys(raw)
    except Exception:  # a read never raises on a stored row
        return []


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value


def _integer(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def audit_params(entry: AuditEntry) -> dict[str, Any]:
    """The parameters of ``append_audit.sql``."""
    return {
        "actor": entry.actor,
        "action": entry.action,
        "queue": entry.queue,
        "selector": _json(entry.selector),
        "count": entry.count,
        "reason": entry.reason,
        "error": entry.error,
    }


def audit_id(seq: int) -> str:
    """The public id of the audit row ``seq``: fixed width, so ids sort as the rows do."""
    return f"{seq:020d}"


def audit_seq(entry_id: str) -> int | None:
    """The row number behind an audit id, or ``None`` if it is not one of ours."""
    if len(entry_id) != 20 or not entry_id.isdigit():
        return None
    return int(entry_id)


def audit_from_row(row: Sequence[Any]) -> AuditEntry:
    """An entry selected as ``seq, time, actor, action, queue, selector, count, reason, error``."""
    try:
        selector = _decode_object(row[5])
    except (msgspec.DecodeError, ValueError, TypeError):
        selector = {"unreadable": row[5]}
    return AuditEntry(
        id=audit_id(row[0]),
        time=from_us(row[1]),
        actor=row[2],
        action=row[3],
        queue=row[4],
        selector=selector,
        count=row[6],
        reason=row[7],
        error=row[8],
    )
