"""What the console's pages read of flow control and the fleet: breakers and pauses, the
workers judged live or silent by the store's clock, the per-minute rates, the tasks a silent
worker holds. A store without the capability a part needs leaves that part empty with the
sentence saying what it lacks (``unsupported``), never an error page."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rdq.admin import WorkerView
from rdq.errors import Unsupported
from rdq.flow import LIMIT_PREFIX, BreakerView, LimitView, PauseView, value_of
from rdq.server._node import Node
from rdq.spi import Counts, Envelope, Page, Status, TaskFilter

__all__ = [
    "Fleet",
    "Flow",
    "fleet_of",
    "flow_of",
    "holder_note",
    "key_label",
    "limits_of",
    "rates_of",
    "silent_holdings",
    "span",
]

SILENT_SCAN_LIMIT = 1000
"""IN_FLIGHT tasks of a queue looked at for a silent holder (one page)."""


def span(seconds: Any) -> str:
    """``41 s``, ``3 min``, ``2.5 h``, ``3 d``."""
    if seconds is None:
        return "–"
    value = abs(float(seconds))
    if value < 90:
        return f"{value:.0f} s"
    if value < 5400:
        return f"{value / 60:.0f} min"
    if value < 172800:
        return f"{value / 3600:.1f} h"
    return f"{value / 86400:.0f} d"


def key_label(key: str) -> str:
    """``the whole queue``, ``handler charge_card``, ``dependency psp``."""
    if key == "*":
        return "the whole queue"
    if key.startswith("handler:"):
        return "handler " + key.removeprefix("handler:")
    if key.startswith("dep:"):
        return "dependency " + key.removeprefix("dep:")
    if key.startswith(LIMIT_PREFIX):
        name, per_value, _ = key.removeprefix(LIMIT_PREFIX).partition(":")
        return f"{name} {value_of(key)}" if per_value else f"limit {name}"
    return "key " + key


@dataclass
class Fleet:
    """The registered workers as of the store's ``now`` (``unsupported``: the store keeps
    no registry)."""

    now: datetime | None = None
    workers: list[WorkerView] = field(default_factory=list)
    unsupported: str | None = None

    @property
    def known(self) -> bool:
        return self.unsupported is None

    def by_id(self, worker_id: str | None) -> WorkerView | None:
        return next((w for w in self.workers if w.id == worker_id), None)

    def silent(self, worker_id: str | None) -> WorkerView | None:
        worker = self.by_id(worker_id)
        return worker if worker is not None and worker.status == "silent" else None

    def serving(self, queue: str) -> list[WorkerView]:
        return [w for w in self.workers if w.status == "live" and queue in w.queues]

    @property
    def silent_workers(self) -> list[WorkerView]:
        return [w for w in self.workers if w.status == "silent"]


async def fleet_of(node: Node) -> Fleet:
    try:
        now, workers = await node.admin.workers()
    except Unsupported as exc:
        return Fleet(unsupported=str(exc))
    return Fleet(now=now, workers=workers)


@dataclass
class Flow:
    """The breakers and pauses of a queue (of every queue)."""

    breakers: list[BreakerView] = field(default_factory=list)
    pauses: list[PauseView] = field(default_factory=list)
    unsupported: str | None = None

    @property
    def tripped(self) -> list[BreakerView]:
        """Open and half-open breakers."""
        return [b for b in self.breakers if b.state != "closed"]

    def paused(self, key: str) -> PauseView | None:
        return next((p for p in self.pauses if p.key == key), None)


async def flow_of(node: Node, queue: str | None = None) -> Flow:
    try:
        breakers = await node.admin.breakers(queue)
        pauses = await node.admin.pauses(queue)
    except Unsupported as exc:
        return Flow(unsupported=str(exc))
    return Flow(breakers=breakers, pauses=pauses)


@dataclass
class Limits:
    """The declared limits of a queue (``unsupported``: the store keeps no controls)."""

    limits: list[LimitView] = field(default_factory=list)
    unsupported: str | None = None

    def full(self) -> dict[str, str]:
        """The keys at their concurrency limit now, each with what to say of a task that
        waits on it (``limit psp full: 20 of 20``)."""
        found: dict[str, str] = {}
        for view in self.limits:
            if view.concurrency is None:
                continue
            if view.kind != "value" and view.in_use >= view.concurrency:
                found[view.key] = f"limit full: {view.in_use} of {view.concurrency}"
            for value in view.values:
                if value.in_use >= view.concurrency:
                    found[value.key] = f"limit full: {value.in_use} of {view.concurrency}"
        return found


async def limits_of(node: Node, queue: str) -> Limits:
    try:
        return Limits(limits=await node.admin.limits(queue))
    except Unsupported as exc:
        return Limits(unsupported=str(exc))


async def rates_of(
    node: Node, queue: str | None = None, minutes: int = 60
) -> tuple[dict[str, list[Counts]], str | None]:
    try:
        _, series = await node.admin.rates(queue, minutes)
    except Unsupported as exc:
        return {}, str(exc)
    return series, None


def holder_note(task: dict[str, Any], fleet: Fleet) -> dict[str, Any] | None:
    """For an IN_FLIGHT task held by a silent worker: who, silent for how long, and when its
    lease expires (seconds from the store's now; negative: it lapsed)."""
    if task.get("status") != "IN_FLIGHT" or fleet.now is None:
        return None
    worker = fleet.silent(task.get("claimed_by"))
    if worker is None:
        return None
    lease = task.get("lease_expires_at")
    lease_at = (
        datetime.fromisoformat(lease.replace("Z", "+00:00")) if isinstance(lease, str) else lease
    )
    lease_in = (lease_at - fleet.now).total_seconds() if isinstance(lease_at, datetime) else None
    return {"worker": worker.id, "silent_for": worker.silent_for, "lease_in": lease_in}


async def silent_holdings(node: Node, fleet: Fleet) -> list[dict[str, Any]]:
    """The IN_FLIGHT tasks that silent workers hold: a page of each queue a silent worker
    said it served (of every queue when one named none); nothing is read when no worker is
    silent."""
    silent = {w.id for w in fleet.silent_workers}
    if not silent:
        return []
    if any(not w.queues for w in fleet.silent_workers):
        queues = [s.queue for s in await node.queues() if s.in_flight]
    else:
        queues = sorted({q for w in fleet.silent_workers for q in w.queues})
    pages = await asyncio.gather(*(_in_flight(node, queue) for queue in queues))
    held: list[dict[str, Any]] = []
    for queue, tasks in zip(queues, pages, strict=True):
        for task in tasks:
            if task.claimed_by in silent:
                note = holder_note(
                    {
                        "status": "IN_FLIGHT",
                        "claimed_by": task.claimed_by,
                        "lease_expires_at": task.lease_expires_at,
                    },
                    fleet,
                )
                held.append({"id": task.id, "queue": queue, **(note or {})})
    return held


async def _in_flight(node: Node, queue: str) -> list[Envelope]:
    try:
        tasks, _ = await node.admin.list_tasks(
            queue, TaskFilter(status=Status.IN_FLIGHT), Page(limit=SILENT_SCAN_LIMIT)
        )
    except NotImplementedError:
        return []
    return tasks
