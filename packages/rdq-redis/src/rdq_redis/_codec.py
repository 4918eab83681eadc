"""How a task is laid out in its Redis hash, and back.

The hash holds the envelope's fixed part as JSON written by :mod:`rdq.spi.codec` (``body``:
payload, headers, handler_ref, retry and every unknown field, losslessly) beside the fields
the scripts change: ``status``, ``token``, ``attempt_count``, ``redrive_count``, the times as
integer microseconds (``created_at``, ``next_attempt_at``, ``lease_expires_at``,
``claimed_at``, ``completed_at``, ``dead_lettered_at``), ``attempts`` (a JSON array of attempt
records with times in microseconds, which the scripts append to without parsing), and
``handler_ref`` / ``error_type`` (the last attempt's) for DLQ filters.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from rdq.errors import StorageError
from rdq.spi import Attempt, Envelope, Outcome, envelope_from_builtins, envelope_to_builtins

__all__ = [
    "MANAGED_FIELDS",
    "attempt_json",
    "attempts_json",
    "envelope_body",
    "envelope_from_hash",
    "from_us",
    "hash_pairs",
    "to_us",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)

MANAGED_FIELDS = (
    "status",
    "attempt_count",
    "redrive_count",
    "attempts",
    "created_at",
    "next_attempt_at",
    "lease_expires_at",
    "completed_at",
    "dead_lettered_at",
)
"""Envelope fields kept in their own hash fields rather than in ``body``."""

_TIME_FIELDS = ("created_at", "next_attempt_at", "lease_expires_at", "completed_at")
_TIME_FIELDS_ALL = (*_TIME_FIELDS, "dead_lettered_at")


class _StoredAttempt(msgspec.Struct, kw_only=True, omit_defaults=True):
    number: int
    outcome: Outcome
    error_type: str | None = None
    error_message: str | None = None
    started_at: int | None = None
    finished_at: int | None = None
    worker_id: str | None = None


_encoder = msgspec.json.Encoder()
_attempts_decoder = msgspec.json.Decoder(list[_StoredAttempt])
_body_decoder = msgspec.json.Decoder(dict[str, Any])


def to_us(at: datetime) -> int:
    """Integer microseconds since the epoch (exact for any aware datetime)."""
    return (at - EPOCH) // _US


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


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
    )


def attempt_json(attempt: Attempt) -> bytes:
    """One attempt record as the scripts append it."""
    return _encoder.encode(_stored(attempt))


def attempts_json(attempts: Sequence[Attempt]) -> bytes:
    return _encoder.encode([_stored(a) for a in attempts])


def envelope_body(task: Envelope) -> bytes:
    """The envelope without its managed fields, unknown fields included."""
    obj = envelope_to_builtins(task)
    for name in MANAGED_FIELDS:
        obj.pop(name, None)
    return _encoder.encode(obj)


def hash_pairs(flat: Sequence[bytes]) -> dict[bytes, bytes]:
    """``[k1, v1, k2, v2, ...]`` (an HGETALL reply inside a script result) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def envelope_from_hash(fields: dict[bytes, bytes], *, with_attempts: bool = True) -> Envelope:
    """Rebuild the envelope from its hash. ``StorageError`` if the hash is not an rdq task."""
    try:
        obj = _body_decoder.decode(fields[b"body"])
        obj["status"] = fields[b"status"].decode()
        obj["attempt_count"] = int(fields[b"attempt_count"])
        obj["redrive_count"] = int(fields[b"redrive_count"])
        for name in _TIME_FIELDS_ALL:
            raw = fields.get(name.encode())
            obj[name] = None if raw is None else from_us(int(raw))
        if with_attempts:
            stored = _attempts_decoder.decode(fields.get(b"attempts") or b"[]")
            obj["attempts"] = [_attempt(a) for a in stored]
        else:
            obj["attempts"] = []
    except (KeyError, ValueError, msgspec.DecodeError) as exc:
        raise StorageError(f"a stored task is not in rdq's Redis layout: {exc!r}") from None
    return envelope_from_builtins(obj)


def _attempt(stored: _StoredAttempt) -> dict[str, Any]:
    return {
        "number": stored.number,
        "outcome": stored.outcome,
        "error_type": stored.error_type,
        "error_message": stored.error_message,
        "started_at": None if stored.started_at is None else from_us(stored.started_at),
        "finished_at": None if stored.finished_at is None else from_us(stored.finished_at),
        "worker_id": stored.worker_id,
    }
