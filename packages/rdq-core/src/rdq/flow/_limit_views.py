"""What the operator surfaces show of the limits that hold across the fleet: each declared
limit of a queue, how much of it is in use now (the store's count of live leases), its rate
as the store enforces it now (lowered after a ``RetryAfter``, or ramping after an outage),
and what waits on it.

A limit is read from the control records alone (what the workers wrote there by
:mod:`rdq.flow._limit_rules`), so a node or a CLI without the application shows it too. A
per-value limit (``limit:<name>:<value>``, one record per value) is shown as one limit with
its busiest values.

*Waiting* counts the due PENDING tasks that carry the limit's key: read from one page of the
queue's due tasks (the first :data:`WAITING_SCAN` by due time; more is shown as "at least"),
from a store with ``task_listing``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

import msgspec

from rdq.flow._compose import LimitState, limit_of, lowered_of
from rdq.flow._limit_config import LIMIT_PREFIX, value_of
from rdq.spi import (
    QUEUE_KEY,
    Control,
    Page,
    Status,
    Storage,
    TaskFilter,
    bounds,
    require,
    task_keys,
)

__all__ = [
    "MAX_VALUES",
    "WAITING_SCAN",
    "LimitValue",
    "LimitView",
    "count_waiting",
    "limit_views",
    "limit_views_of",
]

WAITING_SCAN = bounds.MAX_LIMIT
MAX_VALUES = 20
"""The values of a per-value limit shown (the busiest first)."""


class LimitValue(msgspec.Struct, kw_only=True, frozen=True):
    """One value of a per-value limit: its record's key, the value, its use now."""

    key: str
    value: str
    in_use: int = 0
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    lowered_until: datetime | None = None


class LimitView(msgspec.Struct, kw_only=True, frozen=True):
    """One declared limit of a queue as the operator sees it."""

    queue: str
    name: str
    """``*`` (the whole queue), ``handler:<ref>``, or the limit's name."""
    key: str
    """The record's key, or ``limit:<name>:*`` for a per-value limit."""
    kind: str
    """``queue``, ``handler``, ``key`` (a named key) or ``value`` (per value)."""
    concurrency: int | None = None
    """Declared: at most this many tasks of the key (of each value) hold a claim at once."""
    rate: int | None = None
    per: float = 1.0
    burst: int | None = None
    """Declared: at most ``rate`` claims per ``per`` seconds, ``burst`` at once."""
    adaptive: bool = False
    in_use: int = 0
    """Tasks with the key (any value) that hold a live lease now."""
    keys: int = 1
    """Records: one, or one per value seen."""
    saturated: int = 0
    """Keys at their concurrency limit now."""
    lowered: int = 0
    """Keys whose rate is lowered now after a ``RetryAfter``."""
    current_rate: int | None = None
    current_per: float = 1.0
    """The rate the store enforces now (one key): lowered, ramping after an outage, or as
    declared."""
    lowered_until: datetime | None = None
    waiting: int | None = None
    """Due PENDING tasks with the key (``None``: not counted)."""
    waiting_more: bool = False
    """``waiting`` is a lower bound."""
    values: list[LimitValue] = []
    declared_by: str = ""
    declared_at: datetime | None = None


def _kind(name: str, per_value: bool) -> str:
    if per_value:
        return "value"
    if name == QUEUE_KEY:
        return "queue"
    return "handler" if name.startswith("handler:") else "key"


def limit_views_of(queue: str, controls: Sequence[Control]) -> list[LimitView]:
    """The limits ``controls`` (records of ``queue``, with ``in_use``) hold, by name."""
    groups: dict[str, list[tuple[Control, LimitState]]] = {}
    for control in controls:
        spec = limit_of(control)
        if spec is not None:
            groups.setdefault(spec.name, []).append((control, spec))
    views = []
    for name in sorted(groups):
        members = groups[name]
        control, spec = members[0]
        lowered = [(c, lowered_of(c)) for c, _ in members]
        in_use = [c.in_use or 0 for c, _ in members]
        view = LimitView(
            queue=queue,
            name=name,
            key=f"{LIMIT_PREFIX}{name}:*" if spec.per_value else control.key,
            kind=_kind(name, spec.per_value),
            concurrency=spec.concurrency,
            rate=spec.rate,
            per=spec.per,
            burst=spec.burst,
            adaptive=spec.adaptive,
            in_use=sum(in_use),
            keys=len(members),
            saturated=sum(
                1
                for c, s in members
                if s.concurrency is not None and (c.in_use or 0) >= s.concurrency
            ),
            lowered=sum(1 for _, low in lowered if low is not None),
            declared_by=spec.by,
            declared_at=spec.declared_at,
        )
        if spec.per_value:
            busiest = sorted(members, key=lambda m: (-(m[0].in_use or 0), m[0].key))
            view = msgspec.structs.replace(
                view,
                values=[_value(c) for c, _ in busiest[:MAX_VALUES]],
            )
        else:
            low = lowered[0][1]
            view = msgspec.structs.replace(
                view,
                current_rate=control.rate,
                current_per=control.per,
                lowered_until=low.until if low is not None else None,
            )
        views.append(view)
    return views


def _value(control: Control) -> LimitValue:
    low = lowered_of(control)
    return LimitValue(
        key=control.key,
        value=value_of(control.key),
        in_use=control.in_use or 0,
        concurrency=control.concurrency,
        rate=control.rate,
        per=control.per,
        lowered_until=low.until if low is not None else None,
    )


async def count_waiting(storage: Storage, queue: str, views: list[LimitView]) -> list[LimitView]:
    """``views`` with ``waiting`` counted (see the module's docstring); unchanged from a
    store that cannot list PENDING tasks."""
    if not views or not storage.capabilities().task_listing:
        return views
    now = await storage.now()
    try:
        tasks, cursor = await storage.list_tasks(
            queue, TaskFilter(status=Status.PENDING, before=now), Page(limit=WAITING_SCAN)
        )
    except NotImplementedError:
        return views
    counted: Counter[str] = Counter()
    for task in tasks:
        keys = task_keys(task)
        for view in views:
            prefix = view.key[:-1] if view.kind == "value" else None
            if any(k.startswith(prefix) if prefix else k == view.key for k in keys):
                counted[view.name] += 1
    more = cursor is not None
    return [msgspec.structs.replace(v, waiting=counted[v.name], waiting_more=more) for v in views]


async def limit_views(
    storage: Storage, queue: str | None = None, *, waiting: bool = True
) -> list[LimitView]:
    """Every declared limit of ``queue`` (of every queue), by queue and name; with
    ``waiting``, what waits on each."""
    require(storage, "control", "limits")
    if queue is not None:
        bounds.check_queue(queue)
    by_queue: dict[str, list[Control]] = {}
    for control in await storage.list_controls(queue):
        by_queue.setdefault(control.queue, []).append(control)
    views: list[LimitView] = []
    for name in sorted(by_queue):
        found = limit_views_of(name, by_queue[name])
        views += await count_waiting(storage, name, found) if waiting else found
    return views
