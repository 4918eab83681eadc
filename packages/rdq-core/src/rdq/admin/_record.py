"""Recording an operator action: the store's audit trail, the ``rdq.audit`` log, extra sinks.

The action has happened (or failed) by the time it is recorded, so a destination that cannot
take the record never turns the action's outcome into an error: each write is tried
``AUDIT_ATTEMPTS`` times, and one that still fails is logged as an error on ``rdq.admin`` and
counted in the ``rdq_audit_failures`` metric (see docs/operations.md, "The audit trail").
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from rdq import audit
from rdq.admin._selectors import TaskSelector
from rdq.audit import Action, AuditRecord, AuditSink
from rdq.logging import get_logger
from rdq.spi import AuditEntry, Doubling, Selector, Storage, limits

__all__ = ["AUDIT_ATTEMPTS", "record_action"]

AUDIT_ATTEMPTS = 3
"""How many times each destination is asked to take an audit record."""
_FIRST_RETRY_DELAY = 0.1
"""Seconds before the second try; each later one waits four times as long."""

_log = get_logger("rdq.admin")
T = TypeVar("T")


class _NotRecorded(Exception):
    """A destination did not take the record after every try."""


async def record_action(
    storage: Storage,
    sinks: list[AuditSink],
    action: Action,
    queue: str,
    selector: Selector | TaskSelector | dict[str, Any],
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
        selector=audit.selector_to_builtins(selector),
        count=count,
        reason=reason,
        error=error[: limits.MAX_ERROR_MESSAGE_LENGTH] if error else None,
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
        time=stored.time if stored is not None and stored.time else audit.now_utc(),
        error=error,
        id=stored.id if stored is not None else None,
    )
    audit.log_record(record)
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
                _log.error(
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
