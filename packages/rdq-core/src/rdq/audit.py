"""Audit records of operator actions (redrive, purge, cancel, retry now, pauses, breakers by
hand, key rotations) and of the breakers' own transitions.

Every such action done through :class:`rdq.admin.TaskAdmin` (the API, the web UI and the CLI
all go through it) produces one :class:`AuditRecord`: who did what to which queue, with which
selector, how many tasks it touched, why, and when. The admin stores it in the storage's own
audit trail (``Storage.append_audit``: shared by every node and CLI on that store, readable
with ``rdq audit``, ``GET /v1/audit`` and the UI), logs it on the dedicated logger ``rdq.audit``
(see :mod:`rdq.logging`), and appends it to every extra :class:`AuditSink`, for example a
:class:`JsonLinesAuditSink` file that is only ever appended to. :func:`record_action` is that
write, shared by the admin layer and the worker (a breaker's transitions); :func:`check_action`
checks an action's queue, actor and reason before it is taken.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

import msgspec

from rdq.errors import ValidationError
from rdq.logging import get_logger
from rdq.spi import AuditEntry, Doubling, Selector, Storage, bounds

__all__ = [
    "AUDIT_ATTEMPTS",
    "AUDIT_LOGGER_NAME",
    "COUNT_UNKNOWN",
    "AuditRecord",
    "AuditSink",
    "JsonLinesAuditSink",
    "MemoryAuditSink",
    "check_action",
    "describe_selector",
    "log_record",
    "record_action",
    "selector_to_builtins",
]

AUDIT_LOGGER_NAME = "rdq.audit"

COUNT_UNKNOWN = "the count is unknown: the store may have applied the call that failed"
"""Ends the ``error`` of a record whose last storage call failed in a way that leaves its
effect unknown (its ``count`` is then a lower bound)."""

Action = Literal[
    "redrive",
    "purge",
    "cancel",
    "retry_now",
    "pause",
    "resume",
    "breaker.open",
    "breaker.probe",
    "breaker.close",
    "redrive.cancel",
    "expire",
    "import",
    "dedup",
    "keys.rotate",
]
"""What an operator (or, for a breaker or retention, the engine) did. The breaker's own
transitions and retention's rounds (``expire``: archived, then removed) are recorded with the
worker's id as the actor; ``import`` puts archived or exported tasks back; ``dedup`` is a
submission under a dedup key that added no task (skipped, replaced or extended)."""


class AuditRecord(msgspec.Struct, kw_only=True, frozen=True):
    """One operator action (redrive, purge, cancel, retry now, pause, resume) or breaker
    transition. ``count`` is how many tasks it acted on; ``error`` is set
    when the operation failed part-way (``count`` then says how many were done before it
    failed; when the call that failed may still have been applied by the store — a timeout, a
    lost connection — ``error`` ends with :data:`COUNT_UNKNOWN` and ``count`` is only what is
    known done). ``id`` is the entry's id in the storage's audit trail (None when the store
    could not record it); ``time`` is the storage's time when it did."""

    actor: str
    action: Action
    queue: str
    selector: dict[str, Any]
    count: int
    reason: str | None
    time: datetime
    error: str | None = None
    id: str | None = None


@runtime_checkable
class AuditSink(Protocol):
    """Somewhere audit records are appended. ``write`` must not lose a record it returned for."""

    async def write(self, record: AuditRecord) -> None: ...


class JsonLinesAuditSink:
    """Appends each record as one JSON line to ``path`` (created if missing), flushed and
    fsynced before ``write`` returns. Lines are never rewritten; several processes may append
    to the same file (each line is written with one ``O_APPEND`` write)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    async def write(self, record: AuditRecord) -> None:
        line = msgspec.json.encode(record) + b"\n"
        await asyncio.to_thread(self._append, line)

    def _append(self, line: bytes) -> None:
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

    def read(self) -> list[AuditRecord]:
        """Every record in the file, oldest first (for tests and tooling)."""
        if not self.path.exists():
            return []
        decoder = msgspec.json.Decoder(AuditRecord)
        return [decoder.decode(line) for line in self.path.read_bytes().splitlines() if line]


class MemoryAuditSink:
    """Keeps records in a list: for tests and embedding."""

    def __init__(self) -> None:
        self.records: list[AuditRecord] = []

    async def write(self, record: AuditRecord) -> None:
        self.records.append(record)


def selector_to_builtins(selector: Selector | Any) -> dict[str, Any]:
    """The selector (a DLQ ``Selector``, a cancel ``TaskSelector``, or what a control action
    names: ``{"key": …}``) as plain JSON-ready data, for audit records and logs."""
    if isinstance(selector, dict):
        return dict(selector)
    if selector.ids is not None:
        return {"ids": list(selector.ids)}
    return {"filter": msgspec.to_builtins(selector.filter)}


def describe_selector(selector: dict[str, Any]) -> str:
    """A stored selector in words, for a table: ``error_type=X handler_ref=Y``,
    ``3 id(s): a, b, c``, ``key handler:charge``, ``op 5f1f9b at 20/s, everything``,
    ``skipped into order-1, key order:7``."""
    words: list[str] = []
    if "outcome" in selector:  # a submission folded under a dedup key
        words.append(f"{selector['outcome']} into {selector.get('task')}")
    if "key" in selector:
        words.append(f"key {selector['key']}")
    if "op" in selector:
        words.append(
            f"op {selector['op']}" + (f" at {selector['rate']}" if "rate" in selector else "")
        )
    ids = selector.get("ids")
    if isinstance(ids, list):
        shown = ", ".join(str(i) for i in ids[:3]) + (", …" if len(ids) > 3 else "")
        words.append(f"{len(ids)} id(s): {shown}")
    chosen = selector.get("filter")
    if isinstance(chosen, dict):
        words.append(" ".join(f"{k}={v}" for k, v in sorted(chosen.items())) or "everything")
    return ", ".join(words) or "-"


def now_utc() -> datetime:
    return datetime.now(UTC)


def log_record(record: AuditRecord) -> None:
    """Log ``record`` on the ``rdq.audit`` logger (``TaskAdmin`` also stores it in the audit
    trail and appends it to every sink)."""
    fields = msgspec.to_builtins(record)
    event = fields.pop("action")
    get_logger(AUDIT_LOGGER_NAME).info(event, audit=True, action=event, **fields)


def check_action(queue: str, actor: str, reason: str | None) -> None:
    """Raise ``ValidationError`` naming the field unless ``queue``, ``actor`` and ``reason``
    fit an audit entry (checked before the action, so a bad one changes nothing)."""
    bounds.check_queue(queue)
    if not isinstance(actor, str) or not actor:
        raise ValidationError("must be a non-empty string", field="actor")
    if len(actor) > bounds.MAX_AUDIT_WORD_LENGTH:
        raise ValidationError(
            f"longer than {bounds.MAX_AUDIT_WORD_LENGTH} characters", field="actor"
        )
    if reason is not None and len(reason) > bounds.MAX_AUDIT_REASON_LENGTH:
        raise ValidationError(
            f"longer than {bounds.MAX_AUDIT_REASON_LENGTH} characters", field="reason"
        )


AUDIT_ATTEMPTS = 3
"""How many times each destination is asked to take an audit record."""
_FIRST_RETRY_DELAY = 0.1
"""Seconds before the second try; each later one waits four times as long."""

T = TypeVar("T")
_admin_log = get_logger("rdq.admin")


class _NotRecorded(Exception):
    """A destination did not take the record after every try."""


async def record_action(
    storage: Storage,
    sinks: list[AuditSink],
    action: Action,
    queue: str,
    selector: Selector | msgspec.Struct | dict[str, Any],
    actor: str,
    reason: str | None,
    count: int,
    error: str | None,
) -> bool:
    """Store the record in the audit trail, then log it and hand it to every sink.

    Never raises (but for cancellation): returns True when every destination took the record;
    a destination that did not is logged and counted (``rdq_audit_failures``)."""
    entry = AuditEntry(
        actor=actor,
        action=action,
        queue=queue,
        selector=selector_to_builtins(selector),
        count=count,
        reason=reason,
        error=error[: bounds.MAX_ERROR_MESSAGE_LENGTH] if error else None,
    )
    recorded = True
    stored: AuditEntry | None = None
    if storage.capabilities().audit:  # without it, the log and the sinks have the record
        try:
            stored = await _tried(lambda: storage.append_audit(entry), "storage", action, queue)
        except _NotRecorded:
            recorded = False
    record = AuditRecord(
        actor=actor,
        action=action,
        queue=queue,
        selector=entry.selector,
        count=count,
        reason=reason,
        time=stored.time if stored is not None and stored.time else now_utc(),
        error=error,
        id=stored.id if stored is not None else None,
    )
    log_record(record)
    for sink in sinks:
        name = type(sink).__name__
        try:
            await _tried(functools.partial(sink.write, record), name, action, queue)
        except _NotRecorded:
            recorded = False
    return recorded


async def _tried(write: Callable[[], Awaitable[T]], destination: str, action: str, queue: str) -> T:
    """``write()``, tried up to ``AUDIT_ATTEMPTS`` times; ``_NotRecorded`` (after logging the
    last error and counting the failure) when every try failed."""
    attempt, backoff = 1, Doubling(_FIRST_RETRY_DELAY, _FIRST_RETRY_DELAY * 2**AUDIT_ATTEMPTS)
    while True:
        try:
            return await write()
        except Exception as exc:
            if attempt >= AUDIT_ATTEMPTS:
                _admin_log.error(
                    "the store did not record the audit entry"
                    if destination == "storage"
                    else "audit sink failed",
                    destination=destination,
                    action=action,
                    queue=queue,
                    attempts=attempt,
                    error=f"{type(exc).__name__}: {exc}",
                )
                _count_failure(destination, action, queue)
                raise _NotRecorded(destination) from exc
        await asyncio.sleep(backoff.next())
        attempt += 1


def _count_failure(destination: str, action: str, queue: str) -> None:
    from rdq import metrics

    metrics.AUDIT_FAILURES.labels(queue=queue, action=action, destination=destination).inc()
