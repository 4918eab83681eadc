"""An operator's own transitions of a control record: pausing and resuming a key, opening a
breaker by hand and closing one (by hand or after the engine opened it) — each a
compare-and-set (:func:`~rdq.flow.update_control`), each audited. :class:`rdq.admin.TaskAdmin`
is how the surfaces call them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

import msgspec

from rdq.audit import AuditSink, check_action, record_action
from rdq.flow._breaker import State, breaker_of, close, force_open
from rdq.flow._breaker_config import Breaker
from rdq.flow._records import holds_nothing, update_control
from rdq.spi import Control, Storage, bounds

__all__ = ["BreakerChange", "force_breaker", "set_paused"]

BreakerChange = Literal["open", "close"]


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
    from the next claim on; they keep their attempts, and submits are still accepted. A
    resume that leaves the record holding nothing deletes it."""
    check_action(queue, actor, reason)
    bounds.check_control_key(key)

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
    if after is not None and not paused and holds_nothing(after):
        # a resume leaves nothing to keep: the record goes (a typo'd pause leaves no trace)
        await storage.delete_control(queue, key, expected_version=after.version)
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
    bounds.check_control_key(key)
    settings = config or Breaker()

    def apply(control: Control) -> Control | None:
        state = breaker_of(control).state
        if change == "open":
            return force_open(control, now, actor, reason)
        if state is State.CLOSED:
            return None
        return close(control, now, settings)

    before, after = await update_control(storage, queue, key, apply)
    action: Any = "breaker.open" if change == "open" else "breaker.close"
    await record_action(storage, list(sinks), action, queue, {"key": key}, actor, reason, 0, None)
    return after or before
