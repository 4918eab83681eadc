"""What the operator surfaces show of the fleet, read through the store: the workers judged
live or silent by the store's clock, and the per-minute rates of the last hour.

Each read needs a capability of contract version 3 (``worker_registry``, ``counters``) and
raises :class:`~rdq.errors.Unsupported`, naming the store and what it lacks,
from a store without it: the surfaces catch that and say so instead of failing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import msgspec

from rdq.errors import ValidationError
from rdq.spi import Counts, Page, Status, Storage, TaskFilter, WorkerInfo, bounds, require

__all__ = [
    "LIVE_HEARTBEATS",
    "MAX_RATE_MINUTES",
    "WorkerView",
    "rate_series",
    "worker_views",
    "workers_serving",
]

SILENT_SCAN = bounds.MAX_LIMIT
"""IN_FLIGHT tasks of a queue read to count what a silent worker still holds."""
LIVE_HEARTBEATS = 2
"""A worker seen within this many of its heartbeats is live; one silent for longer, silent."""
MAX_RATE_MINUTES = 180
"""The longest span of per-minute rates one read returns (the store keeps three hours)."""
_NODE = "node"


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
    lapsed: int = 0
    """Silent: how many of the tasks it still holds have a lease that lapsed (they wait to be
    reclaimed by another worker)."""


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
    """The store's now and every registered worker, live ones first, each group by id. A
    silent worker's ``held`` is counted from the store (the tasks still claimed by it, which
    fall as other workers reclaim them), not taken from its last heartbeat."""
    require(storage, "worker_registry", "the fleet view")
    now = await storage.now()
    views = [_worker_view(info, now) for info in await storage.list_workers()]
    silent = [w for w in views if w.status == "silent" and w.kind != _NODE]
    if silent:
        held = await _still_held(storage, silent, now)
        views = [
            msgspec.structs.replace(w, held=held[w.id][0], lapsed=held[w.id][1])
            if w.id in held
            else w
            for w in views
        ]
    return now, sorted(views, key=lambda w: (w.status != "live", w.id))


async def _still_held(
    storage: Storage, silent: Sequence[WorkerView], now: datetime
) -> dict[str, tuple[int, int]]:
    """For each silent worker: the IN_FLIGHT tasks still claimed by it (of the first
    :data:`SILENT_SCAN` of each queue it served), and how many of those have a lapsed
    lease."""
    counts = {w.id: [0, 0] for w in silent}
    for queue in sorted({q for w in silent for q in w.queues}):
        try:
            tasks, _ = await storage.list_tasks(
                queue, TaskFilter(status=Status.IN_FLIGHT), Page(limit=SILENT_SCAN)
            )
        except NotImplementedError:
            return {}
        for task in tasks:
            found = counts.get(task.claimed_by or "")
            if found is not None:
                found[0] += 1
                lapsed = task.lease_expires_at is not None and task.lease_expires_at <= now
                found[1] += lapsed
    return {worker_id: (held, lapsed) for worker_id, (held, lapsed) in counts.items()}


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
        bounds.check_queue(queue)
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


def workers_serving(workers: Sequence[WorkerView], queue: str) -> list[WorkerView]:
    """The live workers that claim from ``queue``."""
    return [w for w in workers if w.status == "live" and queue in w.queues]
