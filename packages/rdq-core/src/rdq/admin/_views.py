"""What the operator surfaces show of flow control and the fleet, read through the store: the
breakers and pauses of every queue (with the tasks they hold, when that is cheap to count),
the workers judged live or silent by the store's clock, the per-minute rates of the last
hour, and the PENDING tasks a "retry now" would make due.

Each read needs a capability of contract version 3 (``control``, ``worker_registry``,
``counters``) and raises :class:`~rdq.errors.Unsupported`, naming the store and what it lacks,
from a store without it: the surfaces catch that and say so instead of failing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec

from rdq import flow
from rdq.admin._pace import OP_PREFIX
from rdq.admin._scan import scan_tasks
from rdq.admin._selectors import TaskSelector, check_task_selector
from rdq.errors import NotFound, ValidationError
from rdq.flow._compose import LIMIT_STATE, LOWERED_STATE
from rdq.limiting import LIMIT_PREFIX
from rdq.spi import (
    QUEUE_KEY,
    Control,
    Counts,
    Envelope,
    Page,
    Status,
    Storage,
    TaskFilter,
    WorkerInfo,
    limits,
    require,
)

__all__ = [
    "HELD_COUNT_LIMIT",
    "LIVE_HEARTBEATS",
    "MAX_RATE_MINUTES",
    "BreakerView",
    "PauseView",
    "WorkerView",
    "breaker_view",
    "breaker_views",
    "control_builtins",
    "control_list",
    "count_retry_now",
    "handler_of",
    "held_by",
    "key_kind",
    "pause_views",
    "rate_series",
    "worker_views",
    "workers_serving",
]

LIVE_HEARTBEATS = 2
"""A worker seen within this many of its heartbeats is live; one silent for longer, silent."""
HELD_COUNT_LIMIT = limits.MAX_LIMIT
"""Held tasks are counted up to this many (one page); more is shown as "at least"."""
MAX_RATE_MINUTES = 180
"""The longest span of per-minute rates one read returns (the store keeps three hours)."""
_NODE = "node"


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
    outages: list[flow.Outage] = []


class PauseView(msgspec.Struct, kw_only=True, frozen=True):
    """A paused key of a queue."""

    queue: str
    key: str
    by: str | None = None
    reason: str | None = None
    at: datetime | None = None
    held: int | None = None
    held_more: bool = False


class WorkerView(msgspec.Struct, kw_only=True, frozen=True):
    """A registered worker (or node), judged by the store's clock."""

    id: str
    kind: str = "worker"
    """``worker``, or ``node`` for a server node's own registration (it drives paced
    redrives; the worker a node runs registers on its own)."""
    host: str = ""
    pid: int = 0
    version: str = ""
    queues: list[str] = []
    concurrency: int = 0
    held: int = 0
    state: str = "running"
    heartbeat: float = 10.0
    started_at: datetime | None = None
    seen_at: datetime | None = None
    status: str = "live"
    """``live`` (seen within two heartbeats) or ``silent``."""
    silent_for: float = 0.0
    """Seconds since it was last seen."""


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
    """The control records of ``queue`` but its paced redrives', by key."""
    return sorted(await _controls(storage, queue, "controls"), key=lambda c: c.key)


def _is_op(control: Control) -> bool:
    return control.key.startswith(OP_PREFIX)


async def _controls(storage: Storage, queue: str | None, needed_for: str) -> list[Control]:
    require(storage, "control", needed_for)
    if queue is not None:
        limits.check_queue(queue)
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
    breaker = flow.breaker_of(control)
    half_open = breaker.state is flow.State.HALF_OPEN
    ramping = breaker.state is flow.State.CLOSED and breaker.ramp_from is not None
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


def _worker_view(info: WorkerInfo, now: datetime) -> WorkerView:
    seen = info.seen_at or info.started_at
    silent_for = max((now - seen).total_seconds(), 0.0) if seen is not None else float("inf")
    live = silent_for <= LIVE_HEARTBEATS * max(info.heartbeat, 0.0)
    fields = msgspec.structs.asdict(info)
    fields.pop("extra", None)
    return WorkerView(
        **fields,
        kind=_NODE if info.extra.get("kind") == _NODE else "worker",
        status="live" if live else "silent",
        silent_for=silent_for if silent_for != float("inf") else 0.0,
    )


async def worker_views(storage: Storage) -> tuple[datetime, list[WorkerView]]:
    """The store's now and every registered worker, live ones first, each group by id."""
    require(storage, "worker_registry", "the fleet view")
    now = await storage.now()
    views = [_worker_view(info, now) for info in await storage.list_workers()]
    return now, sorted(views, key=lambda w: (w.status != "live", w.id))


def _minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


async def rate_series(
    storage: Storage, queue: str | None, minutes: int
) -> tuple[datetime, dict[str, list[Counts]]]:
    """The store's now and, per queue (``queue``, or every queue that counted any), the counts
    of each of the last ``minutes`` minutes up to the current one, oldest first; a minute
    without attempts is one of zeros."""
    require(storage, "counters", "rates over time")
    if queue is not None:
        limits.check_queue(queue)
    if not isinstance(minutes, int) or not 1 <= minutes <= MAX_RATE_MINUTES:
        raise ValidationError(f"must be a whole number from 1 to {MAX_RATE_MINUTES}", "minutes")
    now = await storage.now()
    first = _minute(now) - timedelta(minutes=minutes - 1)
    found: dict[str, dict[datetime, Counts]] = {}
    for counts in await storage.read_counts(queue, first):
        found.setdefault(counts.queue, {})[_minute(counts.minute)] = counts
    if queue is not None:
        found.setdefault(queue, {})
    series: dict[str, list[Counts]] = {}
    for name in sorted(found):
        by_minute = found[name]
        series[name] = [
            by_minute.get(at) or Counts(queue=name, minute=at)
            for at in (first + timedelta(minutes=i) for i in range(minutes))
        ]
    return now, series


async def count_retry_now(storage: Storage, queue: str, selector: TaskSelector) -> int:
    """How many of the selected tasks a "retry now" would make due: PENDING ones of ``queue``
    not due yet."""
    limits.check_queue(queue)
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


def handler_of(key: str) -> str | None:
    """The handler ref of a ``handler:`` key."""
    return key.removeprefix("handler:") if key.startswith("handler:") else None


def workers_serving(workers: Sequence[WorkerView], queue: str) -> list[WorkerView]:
    """The live workers that claim from ``queue``."""
    return [w for w in workers if w.status == "live" and queue in w.queues]
