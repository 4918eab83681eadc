"""What the operator surfaces show of breakers and pauses, read from the control records: each
breaker (:class:`BreakerView`) and paused key (:class:`PauseView`) with the tasks it holds
when that is cheap to count, and a record as the API shows it (:func:`control_builtins`).

Each read needs the store's ``control`` capability and raises
:class:`~rdq.errors.Unsupported`, naming the store and what it lacks, from a store without
it: the surfaces catch that and say so instead of failing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from rdq.flow._breaker import Outage, State, breaker_of
from rdq.flow._compose import LIMIT_STATE, LOWERED_STATE
from rdq.flow._keys import OPERATION_PREFIX
from rdq.flow._limit_config import LIMIT_PREFIX
from rdq.spi import QUEUE_KEY, Control, Page, Status, Storage, TaskFilter, bounds, require

__all__ = [
    "HELD_COUNT_LIMIT",
    "BreakerView",
    "PauseView",
    "breaker_view",
    "breaker_views",
    "control_builtins",
    "control_list",
    "handler_of",
    "held_by",
    "key_kind",
    "pause_views",
]

HELD_COUNT_LIMIT = bounds.MAX_LIMIT
"""Held tasks are counted up to this many (one page); more is shown as "at least"."""


class BreakerView(msgspec.Struct, kw_only=True, frozen=True):
    """One breaker as the operator sees it."""

    queue: str
    key: str
    state: str
    """``closed``, ``open`` or ``half_open``."""
    since: datetime | None = None
    until: datetime | None = None
    """Open: when probing may begin (``None`` when opened by hand: until closed by hand)."""
    error_type: str | None = None
    error_message: str | None = None
    sample_task: str | None = None
    """A task whose failure tripped it."""
    by: str | None = None
    """Who opened it by hand (``None``: the engine)."""
    reason: str | None = None
    trips: int = 0
    probes_left: int | None = None
    """Half-open: how many more claims fleet-wide may probe (the key's gate)."""
    rate: int | None = None
    """Closed after an outage: the rate (claims per second) its held tasks are let go at."""
    held: int | None = None
    """PENDING tasks of the key (``None``: not cheap to count for this key)."""
    held_more: bool = False
    """``held`` is a lower bound: there are more."""
    outages: list[Outage] = []


class PauseView(msgspec.Struct, kw_only=True, frozen=True):
    """A paused key of a queue."""

    queue: str
    key: str
    by: str | None = None
    reason: str | None = None
    at: datetime | None = None
    held: int | None = None
    held_more: bool = False


def key_kind(key: str) -> str:
    """``queue``, ``handler``, ``dependency``, ``limit`` (a named or per-value limit's) or
    ``key`` (another task key)."""
    if key == QUEUE_KEY:
        return "queue"
    if key.startswith("handler:"):
        return "handler"
    if key.startswith("dep:"):
        return "dependency"
    if key.startswith(LIMIT_PREFIX):
        return "limit"
    return "key"


def control_builtins(control: Control) -> dict[str, Any]:
    """``control`` as the surfaces show it (JSON-ready): its kind of key, its pause, its
    limits, its breaker (``None`` without one)."""
    pause = control.state.get("pause") if control.paused else None
    return {
        "queue": control.queue,
        "key": control.key,
        "kind": key_kind(control.key),
        "paused": control.paused,
        "pause": dict(pause) if isinstance(pause, dict) else None,
        "gate": control.gate,
        "concurrency": control.concurrency,
        "rate": control.rate,
        "per": control.per,
        "burst": control.burst,
        "in_use": control.in_use,
        "limit": control.state.get(LIMIT_STATE),
        "lowered": control.state.get(LOWERED_STATE),
        "breaker": (
            msgspec.to_builtins(breaker_view(control)) if "breaker" in control.state else None
        ),
        "version": control.version,
        "updated_at": msgspec.to_builtins(control.updated_at),
    }


async def control_list(storage: Storage, queue: str) -> list[Control]:
    """The control records of ``queue`` but the engine's own (paced redrives, retention), by
    key."""
    return sorted(await _controls(storage, queue, "controls"), key=lambda c: c.key)


def _is_op(control: Control) -> bool:
    return control.key.startswith(OPERATION_PREFIX)


async def _controls(storage: Storage, queue: str | None, needed_for: str) -> list[Control]:
    require(storage, "control", needed_for)
    if queue is not None:
        bounds.check_queue(queue)
    return [c for c in await storage.list_controls(queue) if not _is_op(c)]


async def held_by(storage: Storage, queue: str, key: str) -> tuple[int | None, bool]:
    """How many PENDING tasks of ``queue`` have ``key``, when that is cheap: the whole queue's
    (its stats), a handler's (one filtered page, from a store that filters itself); ``None``
    for other keys. The second value says the count is a lower bound."""
    if key == QUEUE_KEY:
        stats = await storage.stats(queue)
        return stats.pending, "pending" in stats.estimated
    if not key.startswith("handler:") or not storage.capabilities().filter_pushdown:
        return None, False
    try:
        tasks, cursor = await storage.list_tasks(
            queue,
            TaskFilter(status=Status.PENDING, handler_ref=key.removeprefix("handler:")),
            Page(limit=HELD_COUNT_LIMIT),
        )
    except NotImplementedError:  # a store that cannot list PENDING tasks
        return None, False
    return len(tasks), cursor is not None


def breaker_view(control: Control) -> BreakerView:
    """The breaker ``control`` holds, as the surfaces show it (held tasks not counted)."""
    breaker = breaker_of(control)
    half_open = breaker.state is State.HALF_OPEN
    ramping = breaker.state is State.CLOSED and breaker.ramp_from is not None
    return BreakerView(
        queue=control.queue,
        key=control.key,
        state=breaker.state.value,
        since=breaker.since,
        until=breaker.until,
        error_type=breaker.error_type,
        error_message=breaker.error_message,
        sample_task=breaker.sample_task,
        by=breaker.by,
        reason=breaker.reason,
        trips=breaker.trips,
        probes_left=control.gate if half_open else None,
        rate=control.rate if ramping else None,
        outages=list(breaker.outages),
    )


_ORDER = {"open": 0, "half_open": 1, "closed": 2}


async def breaker_views(
    storage: Storage, queue: str | None = None, *, count_held: bool = True
) -> list[BreakerView]:
    """Every breaker of ``queue`` (of every queue) that has a state of its own: open ones
    first, then half-open, then closed ones, each by queue and key. ``count_held`` counts the
    tasks open and half-open ones hold (see :func:`held_by`)."""
    views: list[BreakerView] = []
    for control in await _controls(storage, queue, "breakers"):
        if "breaker" not in control.state:
            continue
        view = breaker_view(control)
        if count_held and view.state != "closed":
            held, more = await held_by(storage, control.queue, control.key)
            view = msgspec.structs.replace(view, held=held, held_more=more)
        views.append(view)
    return sorted(views, key=lambda v: (_ORDER.get(v.state, 3), v.queue, v.key))


async def pause_views(
    storage: Storage, queue: str | None = None, *, count_held: bool = True
) -> list[PauseView]:
    """Every paused key of ``queue`` (of every queue), by queue and key."""
    views: list[PauseView] = []
    for control in await _controls(storage, queue, "pauses"):
        if not control.paused:
            continue
        pause = control.state.get("pause") or {}
        at: datetime | None = None
        if isinstance(pause.get("at"), str):
            try:
                at = datetime.fromisoformat(pause["at"])
            except ValueError:
                at = None
        held, more = (
            await held_by(storage, control.queue, control.key) if count_held else (None, False)
        )
        views.append(
            PauseView(
                queue=control.queue,
                key=control.key,
                by=pause.get("by"),
                reason=pause.get("reason"),
                at=at or control.updated_at,
                held=held,
                held_more=more,
            )
        )
    return sorted(views, key=lambda v: (v.queue, v.key))


def handler_of(key: str) -> str | None:
    """The handler ref of a ``handler:`` key."""
    return key.removeprefix("handler:") if key.startswith("handler:") else None
