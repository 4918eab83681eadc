"""Retry now: the selected PENDING tasks of a queue that wait out a backoff become due at once
(one store call per chunk of ids), audited; and how many a retry now would make due."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rdq.admin._finish import to_the_end
from rdq.admin._scan import scan_tasks
from rdq.admin._selectors import TaskSelector, check_task_selector
from rdq.audit import AuditSink, check_action, record_action
from rdq.errors import NotFound, ValidationError
from rdq.spi import Envelope, Status, Storage, bounds, require

__all__ = ["count_retry_now", "retry_now"]


async def retry_now(
    storage: Storage,
    sinks: Sequence[AuditSink],
    queue: str,
    selector: TaskSelector,
    *,
    actor: str,
    reason: str | None,
) -> int:
    """Make the selected PENDING tasks of ``queue`` that wait out a backoff due now."""
    check_action(queue, actor, reason)
    require(storage, "control", "retry now")
    done = 0
    error: str | None = None
    try:
        if selector.ids is not None:
            ids = list(dict.fromkeys(selector.ids))
        else:
            task_filter = selector.filter
            if task_filter is None or task_filter.status is not Status.PENDING:
                raise ValidationError("retry now selects PENDING tasks", field="filter.status")
            caps = storage.capabilities()
            ids = [
                t.id
                async for page in scan_tasks(storage, caps.filter_pushdown, queue, task_filter)
                for t in page
            ]
        for start in range(0, len(ids), bounds.MAX_SELECTOR_IDS):
            chunk = ids[start : start + bounds.MAX_SELECTOR_IDS]
            applied, stopped = await to_the_end(storage.retry_now(queue, chunk))
            done += applied
            if stopped:
                error = "interrupted: stopped before the rest"
                raise asyncio.CancelledError
        return done
    except asyncio.CancelledError:
        error = error or "interrupted"
        raise
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        await record_action(
            storage, list(sinks), "retry_now", queue, selector, actor, reason, done, error
        )


async def count_retry_now(storage: Storage, queue: str, selector: TaskSelector) -> int:
    """How many of the selected tasks a "retry now" would make due: PENDING ones of ``queue``
    not due yet."""
    bounds.check_queue(queue)
    check_task_selector(selector)
    require(storage, "control", "retry now")
    now = await storage.now()

    def waiting(task: Envelope) -> bool:
        return (
            task.queue == queue
            and task.status is Status.PENDING
            and task.next_attempt_at is not None
            and task.next_attempt_at > now
        )

    if selector.ids is not None:
        count = 0
        for task_id in dict.fromkeys(selector.ids):
            try:
                count += waiting(await storage.get(task_id))
            except NotFound:
                continue
        return count
    task_filter = selector.filter
    if task_filter is None or task_filter.status is not Status.PENDING:
        raise ValidationError("retry now selects PENDING tasks", field="filter.status")
    pushdown = storage.capabilities().filter_pushdown
    return sum(
        [
            sum(1 for t in page if waiting(t))
            async for page in scan_tasks(storage, pushdown, queue, task_filter)
        ]
    )
