"""Envelopes to statement arguments and result rows back to envelopes, losslessly.

Free-form fields (payload, headers, attempts, retry, unknown fields) are stored as ``json`` text
written by msgspec and decoded by msgspec, so a round trip returns exactly what was given."""

from __future__ import annotations

from typing import Any

import asyncpg
import msgspec

from rdq.spi import Attempt, Envelope, RetryOverride, Status, envelope_from_builtins

__all__ = ["attempt_args", "encode_json", "enqueue_args", "envelope_from_row"]

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
    "format_version",
)


def _json(value: Any) -> str:
    return _encoder.encode(value).decode()


encode_json = _json


def _text(value: str | None) -> str | None:
    """Text columns cannot hold NUL; the json columns keep the exact value."""
    return value.replace("\x00", "\ufffd") if value is not None else None


def enqueue_args(task: Envelope, payload: str | None = None) -> tuple[Any, ...]:
    """``(id, queue, handler_ref, payload, headers, attempt_count, redrive_count, attempts,
    error_type, next_attempt_at, retry, format_version, extra)`` for the enqueue statements
    (``payload``: the payload already encoded as JSON, if it was)."""
    extra = {k: v for k, v in task.extra.items() if k not in _KNOWN}
    last_error = task.attempts[-1].error_type if task.attempts else None
    return (
        task.id,
        task.queue,
        task.handler_ref,
        _json(task.payload) if payload is None else payload,
        _json(task.headers),
        task.attempt_count,
        task.redrive_count,
        _json(task.attempts),
        _text(last_error),
        task.next_attempt_at,
        None if task.retry is None else _json(task.retry),
        task.format_version,
        _json(extra),
    )


def attempt_args(attempt: Attempt) -> tuple[str, str | None]:
    """The attempt record as JSON and its error type (for the DLQ filter column)."""
    return _json(attempt), _text(attempt.error_type)


def envelope_from_row(row: asyncpg.Record) -> Envelope:
    """Rebuild the envelope from a row of the task table.

    The common row (no unknown fields) is built directly, its JSON columns decoded straight
    into their types; anything else, or a value that does not decode, takes the general path,
    which keeps unknown fields and names the offending field in its ``ValidationError``."""
    if row["extra"] in (None, "{}"):
        try:
            return _envelope_from_typed_row(row)
        except (msgspec.ValidationError, ValueError):
            pass
    return _envelope_from_builtins_row(row)


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
        attempts=[] if attempts == "[]" else _decode_attempts(attempts),
        created_at=row["created_at"],
        next_attempt_at=row["next_attempt_at"],
        lease_expires_at=row["lease_expires_at"],
        completed_at=row["completed_at"],
        dead_lettered_at=row["dead_lettered_at"],
        retry=None if retry is None else _decode_retry(retry),
        format_version=row["format_version"],
    )


def _envelope_from_builtins_row(row: asyncpg.Record) -> Envelope:
    fields: dict[str, Any] = _decode(row["extra"]) if row["extra"] not in (None, "{}") else {}
    for column in _COLUMNS:
        fields[column] = row[column]
    fields["payload"] = _decode(row["payload"])
    fields["headers"] = _decode(row["headers"])
    fields["attempts"] = _decode(row["attempts"])
    retry = row["retry"]
    fields["retry"] = None if retry is None else _decode(retry)
    return envelope_from_builtins(fields)
