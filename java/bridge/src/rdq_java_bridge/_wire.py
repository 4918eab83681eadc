"""The bridge's wire format: arguments to JSON, answers and errors back to rdq's types.

Arguments are encoded with msgspec exactly as rdq encodes them everywhere (envelopes with
:func:`rdq.spi.envelope_to_builtins`, timestamps in RFC 3339, durations in ISO 8601); the Java
side decodes and validates them. Answers are decoded with rdq's own decoders.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from rdq.errors import (
    ConfigError,
    ControlConflict,
    DedupConflict,
    IDConflict,
    NotConnected,
    NotFound,
    RdqError,
    StaleClaim,
    StaleCursor,
    StorageError,
    StorageUnavailable,
    ValidationError,
)
from rdq.spi import (
    AuditEntry,
    Claimed,
    Control,
    Counts,
    DLQGroup,
    Envelope,
    Stats,
    WorkerInfo,
    envelope_from_builtins,
    envelope_to_builtins,
)

__all__ = [
    "claimed",
    "control_of",
    "counts_of",
    "datetime_of",
    "encode_arg",
    "envelope",
    "error_of",
    "page_of",
    "worker_of",
]


def encode_arg(name: str, value: Any) -> Any:
    """``value`` as JSON-ready builtins. A value with no JSON form cannot cross the bridge:
    ``ValidationError`` naming the argument (an envelope's ``payload`` for an unencodable
    payload, as rdq's own check names it)."""
    if isinstance(value, Envelope):
        return _envelope_arg(value)
    if isinstance(value, list | tuple) and any(isinstance(v, Envelope) for v in value):
        return [encode_arg(name, v) for v in value]
    try:
        return msgspec.to_builtins(value)
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"cannot be sent to the Java binding: {exc}", field=name) from None


def _envelope_arg(task: Envelope) -> Any:
    """The envelope as builtins. A payload or unknown field too deep to encode is refused as
    rdq's own check refuses it (the Java side bounds the nesting of the others)."""
    fields = {"payload": task.payload, **(task.extra if isinstance(task.extra, dict) else {})}
    for name, value in fields.items():
        try:
            msgspec.json.encode(value)
        except RecursionError:
            raise ValidationError("nests deeper than the encoder goes", field=name) from None
        except (TypeError, msgspec.EncodeError) as exc:
            raise ValidationError(f"is not JSON-serializable: {exc}", field=name) from None
    try:
        return envelope_to_builtins(task)
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"cannot be sent to the Java binding: {exc}", field="task") from None


def envelope(value: Any) -> Envelope:
    return envelope_from_builtins(value)


def claimed(value: Any) -> Claimed:
    return Claimed(envelope(value["task"]), value["token"])


def datetime_of(value: Any) -> datetime:
    return msgspec.convert(value, datetime)


def page_of(value: Any) -> tuple[list[Envelope], str | None]:
    return [envelope(item) for item in value["items"]], value["cursor"]


def stats_of(value: Any) -> Stats:
    return msgspec.convert(value, Stats)


def groups_of(value: Any) -> list[DLQGroup]:
    return msgspec.convert(value, list[DLQGroup])


def audit_of(value: Any) -> AuditEntry:
    return msgspec.convert(value, AuditEntry)


def control_of(value: Any) -> Control:
    return msgspec.convert(value, Control)


def worker_of(value: Any) -> WorkerInfo:
    return msgspec.convert(value, WorkerInfo)


def counts_of(value: Any) -> list[Counts]:
    return msgspec.convert(value, list[Counts])


def error_of(error: dict[str, Any]) -> BaseException:
    """The rdq exception an error answer stands for."""
    kind = error.get("kind")
    message = str(error.get("message") or "")
    if kind == "ValidationError":
        return ValidationError(message, field=error.get("field"))
    if kind == "ConfigError":
        return ConfigError(message, key=error.get("key"))
    if kind == "StaleClaim":
        return StaleClaim(error["task_id"])
    if kind == "NotFound":
        return NotFound(error["task_id"])
    if kind == "StaleCursor":
        return StaleCursor(error["reason"])
    if kind == "IDConflict":
        return IDConflict(error["task_id"], error["existing_queue"])
    if kind == "DedupConflict":
        return DedupConflict(error["key"], error["existing_queue"], error["task_id"])
    if kind == "ControlConflict":
        found = error.get("found")
        return ControlConflict(
            error["queue"], error["key"], None if found is None else control_of(found)
        )
    if kind == "NotConnected":
        return NotConnected("JavaBridgeStorage", closed=bool(error.get("closed")))
    if kind == "StorageUnavailable":
        return StorageUnavailable(message)
    if kind == "StorageError":
        return StorageError(message)
    if kind == "NotImplemented":
        return NotImplementedError(message)
    return JavaError(f"the Java binding failed: {message}")


class JavaError(RdqError):
    """An unexpected exception in the Java binding (a bug there): its stack trace."""
