"""Recording an operator action: the store's audit trail, the ``rdq.audit`` log, extra sinks."""

from __future__ import annotations

from rdq import audit
from rdq.admin._selectors import TaskSelector
from rdq.audit import Action, AuditRecord, AuditSink
from rdq.logging import get_logger
from rdq.spi import AuditEntry, Selector, Storage, limits

__all__ = ["record_action"]

_log = get_logger("rdq.admin")


async def record_action(
    storage: Storage,
    sinks: list[AuditSink],
    action: Action,
    queue: str,
    selector: Selector | TaskSelector,
    actor: str,
    reason: str | None,
    count: int,
    error: str | None,
) -> None:
    """Store the record in the audit trail, then log it and hand it to every sink.

    Raises what the store or a sink raised, after every other destination got it."""
    entry = AuditEntry(
        actor=actor,
        action=action,
        queue=queue,
        selector=audit.selector_to_builtins(selector),
        count=count,
        reason=reason,
        error=error[: limits.MAX_ERROR_MESSAGE_LENGTH] if error else None,
    )
    failure: BaseException | None = None
    stored: AuditEntry | None = None
    try:
        stored = await storage.append_audit(entry)
    except NotImplementedError:
        pass
    except Exception as exc:
        _log.error("the storage did not record the audit entry", error=str(exc))
        failure = exc
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
    try:
        await audit.emit(record, sinks)
    except Exception as exc:
        failure = failure or exc
    if failure is not None:
        raise failure
