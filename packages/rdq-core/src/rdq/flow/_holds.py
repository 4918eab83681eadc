"""Which claimed task a worker hands back unrun (no attempt used): one of its keys is paused, or
its breaker is open — claimed just before the pause or the trip, or from a store that cannot
hold it back. The store's claim honours the same records first (see :class:`rdq.spi.Control`);
these rules cover what its claim could not see yet."""

from __future__ import annotations

from collections.abc import Mapping

from rdq.flow._breaker import BreakerState
from rdq.spi import Control, Envelope, task_keys

__all__ = ["claimed_since", "paused_key"]


def paused_key(task: Envelope, controls: Mapping[str, Control], shared: bool) -> str | None:
    """The key of ``task`` whose pause holds it, or ``None``. ``controls``: the task's queue's
    records by key as the worker last read them; ``shared``: the store keeps the records (its
    claims honour them), so a task it claimed after a record last changed honoured a newer
    record than the worker's (a pause lifted since) and may run."""
    for key in task_keys(task):
        control = controls.get(key)
        if control is not None and control.paused and not _let_through(task, control, shared):
            return key
    return None


def _let_through(task: Envelope, control: Control, shared: bool) -> bool:
    return (
        shared
        and task.claimed_at is not None
        and control.updated_at is not None
        and task.claimed_at > control.updated_at
    )


def claimed_since(task: Envelope, breaker: BreakerState) -> bool:
    """True when ``task`` was claimed after ``breaker`` entered its state (an open breaker's
    task claimed since then can only be a probe the store let through)."""
    return (
        task.claimed_at is not None
        and breaker.since is not None
        and task.claimed_at >= breaker.since
    )
