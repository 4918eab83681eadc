"""Operator controls of a queue: pause and resume (a queue, a handler, a dependency), breakers
opened and closed by hand, "retry now" — each a compare-and-set on a control record (or, for
retry now, one store call per chunk), each audited."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal

import msgspec

from rdq import flow
from rdq.admin._record import record_action
from rdq.admin._scan import scan_tasks
from rdq.admin._selectors import TaskSelector, check_action
from rdq.audit import AuditSink
from rdq.config import Breaker
from rdq.errors import ControlConflict, ValidationError
from rdq.spi import QUEUE_KEY, Control, Status, Storage, limits, require

__all__ = [
    "BreakerChange",
    "control_key",
    "force_breaker",
    "retry_now",
    "set_paused",
    "update_control",
]

BreakerChange = Literal["open", "close"]

CAS_ATTEMPTS = 10


def control_key(handler: str | None = None, dependency: str | None = None) -> str:
    """The key an operator acts on: a handler's, a dependency's, or the whole queue's."""
    if handler is not None and dependency is not None:
        raise ValidationError("name a handler or a dependency, not both", field="key")
    if handler is not None:
        return f"handler:{handler}"
    if dependency is not None:
        return flow.dependency_key(dependency)
    return QUEUE_KEY


async def update_control(
    storage: Storage, queue: str, key: str, change: Callable[[Control], Control | None]
) -> tuple[Control, Control | None]:
    """Read the (queue, key) record, apply ``change`` and store it over the version it was
    read at, again on a conflict; return (before, after) — ``after`` is ``None`` when
    ``change`` found nothing to do."""
    require(storage, "control", "pausing, breakers and limits shared by the fleet")
    found = {c.key: c for c in await storage.list_controls(queue)}.get(key)
    for _ in range(CAS_ATTEMPTS):
        current = found or Control(queue=queue, key=key)
        changed = change(current)
        if changed is None:
            return current, None
        try:
            stored = await storage.put_control(
                msgspec.structs.replace(changed, in_use=None), expected_version=current.version
            )
        except ControlConflict as conflict:
            found = conflict.found
            continue
        return current, stored
    raise ControlConflict(queue, key, found)


async def set_paused(
    storage: Storage,
    sinks: Sequence[AuditSink],
    queue: str,
    key: str,
    paused: bool,
    *,
    actor: str,
    reason: str | None,
    now: datetime,
) -> Control:
    """Pause (or resume) the tasks of ``key`` in ``queue``: no worker or node claims them
    from the next claim on; they keep their attempts, and submits are still accepted."""
    check_action(queue, actor, reason)
    limits.check_control_key(key)

    def change(control: Control) -> Control | None:
        if control.paused == paused:
            return None
        state = dict(control.state)
        if paused:
            state["pause"] = {"by": actor, "reason": reason, "at": now.isoformat()}
        else:
            state.pop("pause", None)
        return msgspec.structs.replace(control, paused=paused, state=state)

    before, after = await update_control(storage, queue, key, change)
    await record_action(
        storage,
        list(sinks),
        "pause" if paused else "resume",
        queue,
        {"key": key},
        actor,
        reason,
        0 if after is None else 1,
        None,
    )
    return after or before


async def force_breaker(
    storage: Storage,
    sinks: Sequence[AuditSink],
    queue: str,
    key: str,
    change: BreakerChange,
    *,
    actor: str,
    reason: str | None,
    now: datetime,
    config: Breaker | None = None,
) -> Control:
    """Open a breaker by hand (its tasks are held until it is closed by hand), or close one
    (open or half-open, by the engine or by hand): its held tasks are let go over the ramp."""
    check_action(queue, actor, reason)
    limits.check_control_key(key)
    settings = config or Breaker()

    def apply(control: Control) -> Control | None:
        state = flow.breaker_of(control).state
        if change == "open":
            return flow.force_open(control, now, actor, reason)
        if state is flow.State.CLOSED:
            return None
        return flow.close(control, now, settings)

    before, after = await update_control(storage, queue, key, apply)
    action: Any = "breaker.open" if change == "open" else "breaker.close"
    await record_action(storage, list(sinks), action, queue, {"key": key}, actor, reason, 0, None)
    return after or before


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
        for start in range(0, len(ids), limits.MAX_SELECTOR_IDS):
            done += await storage.retry_now(queue, ids[start : start + limits.MAX_SELECTOR_IDS])
        return done
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        await record_action(
            storage, list(sinks), "retry_now", queue, selector, actor, reason, done, error
        )
