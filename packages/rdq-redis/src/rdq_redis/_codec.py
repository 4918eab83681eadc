"""How a task is laid out in its Redis hash, and back.

The hash holds the envelope's fixed part as JSON written by :mod:`rdq.spi.codec` (``body``:
payload, headers, handler_ref, retry and every unknown field, losslessly) beside the fields
the scripts read or change:

- ``status``, ``token``, ``attempt_count``, ``redrive_count``, ``priority``, ``claimed_by``;
- the times as integer microseconds: ``created_at``, ``next_attempt_at``,
  ``lease_expires_at``, ``claimed_at``, ``completed_at``, ``dead_lettered_at``,
  ``cancelled_at``;
- ``attempts``: a JSON array of attempt records with times in microseconds, which the scripts
  append to without parsing;
- ``handler_ref`` and ``error_type`` (the last attempt's) for filters and DLQ groups,
  ``dlq_group`` (the digest of the group a DEAD task is counted in);
- ``keys``: the task's flow-control keys (``Envelope.keys``), newline-separated (a key holds
  no whitespace), absent when there are none; ``held``: the held set of a task a claim held
  back (see :mod:`rdq_redis._keys`);
- ``raw.<field>``: a stored value a script had to replace because it did not decode, kept
  for inspection.

Reading never raises: a hash whose values do not decode (edited by hand, written by a buggy
producer) becomes an envelope with ``corrupt`` saying what is wrong and showing the stored
value; the fields that did decode are filled in.

An audit entry's hash holds ``body`` (the entry as JSON, without id and time) and ``time``
(µs); its id is its key's last part.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from rdq.errors import ValidationError
from rdq.spi import (
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    MIN_PRIORITY,
    Attempt,
    AuditEntry,
    Envelope,
    Outcome,
    Status,
    envelope_from_builtins,
    envelope_to_builtins,
)

__all__ = [
    "MANAGED_FIELDS",
    "attempt_json",
    "attempts_json",
    "audit_body",
    "audit_entry",
    "envelope_body",
    "envelope_from_hash",
    "error_arg",
    "from_us",
    "hash_pairs",
    "keys_text",
    "score_us",
    "to_us",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)

TIME_FIELDS = (
    "created_at",
    "next_attempt_at",
    "lease_expires_at",
    "claimed_at",
    "completed_at",
    "dead_lettered_at",
    "cancelled_at",
)
MANAGED_FIELDS = (
    "status",
    "attempt_count",
    "redrive_count",
    "attempts",
    "priority",
    "claimed_by",
    "keys",
    "corrupt",
    *TIME_FIELDS,
)
"""Envelope fields kept in their own hash fields (or, for ``corrupt``, never stored) rather
than in ``body``."""

_COUNT_KEYS = tuple((name, name.encode()) for name in ("attempt_count", "redrive_count"))
_TIME_KEYS = tuple((name, name.encode()) for name in TIME_FIELDS)
"""The hash field names of the counts and times, encoded once."""

SHOWN_BYTES = 2048
"""How much of a stored value that does not decode ``corrupt`` shows."""

_INT_RE = re.compile(rb"-?[0-9]+")


class _StoredAttempt(msgspec.Struct, kw_only=True, omit_defaults=True):
    number: int
    outcome: Outcome
    error_type: str | None = None
    error_message: str | None = None
    started_at: int | None = None
    finished_at: int | None = None
    worker_id: str | None = None
    traceback: str | None = None


_encoder = msgspec.json.Encoder()
_attempts_decoder = msgspec.json.Decoder(list[_StoredAttempt])
_body_decoder = msgspec.json.Decoder(dict[str, Any])


def to_us(at: datetime) -> int:
    """Integer microseconds since the epoch (exact for any aware datetime)."""
    return (at - EPOCH) // _US


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def score_us(raw: bytes | str | int | float) -> int:
    """A sorted-set score (µs) as Redis replies it, as an integer."""
    if isinstance(raw, bytes):
        raw = raw.decode()
    try:
        return int(raw)
    except ValueError:
        return int(float(raw))


def _opt_us(at: datetime | None) -> int | None:
    return None if at is None else to_us(at)


def _stored(attempt: Attempt) -> _StoredAttempt:
    return _StoredAttempt(
        number=attempt.number,
        outcome=attempt.outcome,
        error_type=attempt.error_type,
        error_message=attempt.error_message,
        started_at=_opt_us(attempt.started_at),
        finished_at=_opt_us(attempt.finished_at),
        worker_id=attempt.worker_id,
        traceback=attempt.traceback,
    )


def attempt_json(attempt: Attempt) -> bytes:
    """One attempt record as the scripts append it."""
    return _encoder.encode(_stored(attempt))


def attempts_json(attempts: Sequence[Attempt]) -> bytes:
    return _encoder.encode([_stored(a) for a in attempts])


def keys_text(keys: Sequence[str]) -> str:
    """A task's flow-control keys as the ``keys`` field holds them ('' for none)."""
    return "\n".join(keys)


def error_arg(error_type: str | None) -> str:
    """An error type as the scripts take it: '' for none, else '=' + the type."""
    return "" if error_type is None else "=" + error_type


def envelope_body(task: Envelope) -> bytes:
    """The envelope without its managed fields, unknown fields included."""
    obj = envelope_to_builtins(task)
    for name in MANAGED_FIELDS:
        obj.pop(name, None)
    return _encoder.encode(obj)


def audit_body(entry: AuditEntry) -> bytes:
    """An audit entry as ``audit_append.lua`` stores it (the script gives id and time)."""
    return _encoder.encode(msgspec.structs.replace(entry, id=None, time=None))


def audit_entry(entry_id: str, fields: dict[bytes, bytes]) -> AuditEntry:
    """An audit entry from its hash."""
    entry = msgspec.json.decode(fields[b"body"], type=AuditEntry)
    return msgspec.structs.replace(entry, id=entry_id, time=from_us(int(fields[b"time"])))


def hash_pairs(flat: Sequence[bytes]) -> dict[bytes, bytes]:
    """``[k1, v1, k2, v2, ...]`` (an HGETALL reply inside a script result) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def envelope_from_hash(
    fields: dict[bytes, bytes],
    *,
    task_id: str,
    queue: str,
    status: Status | None = None,
    with_attempts: bool = True,
) -> Envelope:
    """Rebuild the envelope of task ``task_id`` of ``queue`` from its hash; never raises.

    ``status`` is what the store's index says (it wins over the hash's status field). A value
    that does not decode (JSON nested deeper than the decoder goes and times outside the
    years 1–9999 included) is left at its default and named in ``corrupt``."""
    try:
        return _from_hash(fields, task_id, queue, status, with_attempts)
    except Exception as exc:  # a read never raises on a stored task
        return Envelope(
            id=task_id,
            queue=queue,
            handler_ref="",
            status=status or Status.PENDING,
            corrupt=f"the stored task does not decode ({type(exc).__name__}: {exc})",
        )


def _from_hash(
    fields: dict[bytes, bytes],
    task_id: str,
    queue: str,
    status: Status | None,
    with_attempts: bool,
) -> Envelope:
    problems: list[str] = []
    obj: dict[str, Any] = {}
    raw_body = fields.get(b"body")
    if raw_body is None:
        problems.append("body is missing")
    else:
        try:
            obj.update(_body_decoder.decode(raw_body))
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            problems.append(_bad("body", exc, raw_body))
    obj["id"], obj["queue"] = task_id, queue
    if not isinstance(obj.get("handler_ref"), str):
        handler = fields.get(b"handler_ref")
        obj["handler_ref"] = handler.decode("utf-8", "replace") if handler is not None else ""
    obj["status"] = _status(fields.get(b"status"), status, problems)
    for name, key in _COUNT_KEYS:
        obj[name] = _count(fields.get(key), name, problems)
    obj["priority"] = _priority(fields.get(b"priority"), problems)
    for name, key in _TIME_KEYS:
        raw = fields.get(key)
        obj[name] = None if raw is None else _time(raw, name, problems)
    claimed_by = fields.get(b"claimed_by")
    obj["claimed_by"] = None if claimed_by is None else claimed_by.decode("utf-8", "replace")
    keys = fields.get(b"keys")
    if keys is not None:  # else what the body says (layout 2 kept the keys there)
        obj["keys"] = [k for k in keys.decode("utf-8", "replace").split("\n") if k]
    # Without attempts, a page carries the field only when it does not look like a JSON array
    # (see task_page.lua): decoded for the problem it shows, then left out.
    attempts = _attempts(fields.get(b"attempts"), problems)
    obj["attempts"] = attempts if with_attempts else []
    for key in [key for key in fields if key.startswith(b"raw.")]:
        name = key[4:].decode("utf-8", "replace")
        kept = key.decode("utf-8", "replace")
        problems.append(f"{name} held {_show(fields[key])}, which did not decode (kept as {kept})")
    return _build(obj, problems)


def _build(obj: dict[str, Any], problems: list[str]) -> Envelope:
    """``envelope_from_builtins``, dropping each field it refuses (named in ``problems``)."""
    obj.pop("corrupt", None)
    for _ in range(len(obj) + 1):
        try:
            task = envelope_from_builtins(obj)
        except ValidationError as exc:
            name = (exc.field or "").split(".", 1)[0].split("[", 1)[0]
            if name in ("", "id", "queue") or name not in obj:
                obj = {k: obj[k] for k in ("id", "queue", "handler_ref", "status")}
                problems.append(f"the envelope did not decode: {exc}")
                continue
            problems.append(f"{name}: {exc}; stored value: {_show(obj.pop(name))}")
            if name == "handler_ref":
                obj["handler_ref"] = ""
            continue
        if problems:
            task.corrupt = "; ".join(problems)
        return task
    return Envelope(  # unreachable in practice: every retry drops a field
        id=obj["id"], queue=obj["queue"], handler_ref="", corrupt="; ".join(problems)
    )


def _status(raw: bytes | None, indexed: Status | None, problems: list[str]) -> Status:
    stored: Status | None = None
    if raw is not None:
        try:
            stored = Status(raw.decode())
        except (UnicodeDecodeError, ValueError):
            problems.append(f"status: not a status; stored value: {_show(raw)}")
    else:
        problems.append("status is missing")
    if indexed is not None:
        if stored is not None and stored != indexed:
            problems.append(f"status field says {stored} but the task is indexed as {indexed}")
        return indexed
    return stored or Status.PENDING


def _int(raw: bytes | None) -> int | None:
    if raw is None or not _INT_RE.fullmatch(raw):
        return None
    return int(raw)


def _count(raw: bytes | None, name: str, problems: list[str]) -> int:
    value = _int(raw)
    if value is None or value < 0:
        if raw is not None:
            problems.append(f"{name}: not a count; stored value: {_show(raw)}")
        elif name == "attempt_count":
            problems.append(f"{name} is missing")
        return 0
    return value


def _priority(raw: bytes | None, problems: list[str]) -> int:
    if raw is None:
        return DEFAULT_PRIORITY  # tasks stored before priorities existed
    value = _int(raw)
    if value is None or not MIN_PRIORITY <= value <= MAX_PRIORITY:
        problems.append(f"priority: not a priority; stored value: {_show(raw)}")
        return DEFAULT_PRIORITY
    return value


def _time(raw: bytes, name: str, problems: list[str]) -> datetime | None:
    value = _int(raw)
    if value is not None:
        try:
            return EPOCH + timedelta(microseconds=value)
        except OverflowError:
            pass
    problems.append(f"{name}: not a time in microseconds; stored value: {_show(raw)}")
    return None


def _attempts(raw: bytes | None, problems: list[str]) -> list[dict[str, Any]]:
    if raw is None:
        return []
    try:
        stored = _attempts_decoder.decode(raw)
        return [_attempt(a) for a in stored]
    except (msgspec.DecodeError, msgspec.ValidationError, OverflowError, RecursionError) as exc:
        problems.append(_bad("attempts", exc, raw))
        return []


def _attempt(stored: _StoredAttempt) -> dict[str, Any]:
    return {
        "number": stored.number,
        "outcome": stored.outcome,
        "error_type": stored.error_type,
        "error_message": stored.error_message,
        "started_at": None if stored.started_at is None else from_us(stored.started_at),
        "finished_at": None if stored.finished_at is None else from_us(stored.finished_at),
        "worker_id": stored.worker_id,
        "traceback": stored.traceback,
    }


def _bad(name: str, exc: Exception, raw: bytes) -> str:
    reason = "nests deeper than the decoder goes" if isinstance(exc, RecursionError) else exc
    return f"{name} did not decode ({reason}); stored value: {_show(raw)}"


def _show(raw: object) -> str:
    """A stored value as ``corrupt`` shows it: its text, cut at ``SHOWN_BYTES``."""
    if isinstance(raw, bytes):
        text = raw[:SHOWN_BYTES].decode("utf-8", "replace")
        more = len(raw) - SHOWN_BYTES
    else:
        text = repr(raw)
        more = 0
    return repr(text) + (f" (and {more} more bytes)" if more > 0 else "")
