"""What holds a task and what happens next, as the console's task page says it, for every
surface (``rdq tasks show|list``, ``GET /v1/tasks/{id}/outlook``): the pauses, breakers and
full limits that hold a PENDING task back, whether a live worker serves its queue, who holds
an IN_FLIGHT one (a silent worker, a lapsed lease awaiting its reclaim), and its attempts as
the engine counts them — ``charged`` beside ``attempt_count``, since DEFERRED and
INTERRUPTED attempts and failures during an outage of its dependency use up none
(:func:`rdq.retry.uncharged`) — with what is left of ``max_attempts`` when that is known.

Everything is judged by the store's clock (``storage.now()``), as :class:`WorkerView` judges
workers live or silent. ``max_attempts`` is known from the task's own override, the surface's
application (a node's ``--app``), or the registrations of the live workers of its queue
(each registers the ``max_attempts`` of its queues).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec

from rdq import flow
from rdq.admin._fleet import WorkerView, worker_views
from rdq.app import App
from rdq.errors import Unsupported
from rdq.retry import uncharged
from rdq.spi import Envelope, Status, Storage, task_keys

__all__ = ["Attempts", "Hold", "Holder", "Outlook", "outlooks"]


class Hold(msgspec.Struct, kw_only=True, frozen=True):
    """Something that holds a PENDING task back."""

    kind: str
    """``pause``, ``breaker`` or ``limit``."""
    key: str
    state: str | None = None
    """A breaker's: ``open`` or ``half_open``."""
    by: str | None = None
    reason: str | None = None
    since: datetime | None = None
    """A pause's start; a breaker's outage's start (not its last re-opening)."""
    until: datetime | None = None
    """An open breaker's next probe (``None``: held until closed by hand)."""
    detail: str | None = None


class Holder(msgspec.Struct, kw_only=True, frozen=True):
    """Who holds an IN_FLIGHT task, and its lease."""

    worker: str | None
    status: str | None = None
    """``live``, ``silent`` or ``None`` (not registered, or the store keeps no registry)."""
    silent_for: float | None = None
    lease_in: float | None = None
    """Seconds until its lease expires, by the store's clock; negative: it lapsed that long
    ago and the task waits to be reclaimed (recorded then as ``LEASE_EXPIRED``)."""


class Attempts(msgspec.Struct, kw_only=True, frozen=True):
    """A task's attempts since its last redrive, as the engine counts them."""

    recorded: int
    """``attempt_count``."""
    charged: int
    """Those that used up one of ``max_attempts``."""
    uncharged: int
    max: int | None = None
    left: int | None = None
    """Attempts it may still use (``None``: ``max_attempts`` is not known here)."""


class Outlook(msgspec.Struct, kw_only=True, frozen=True):
    """What holds a task and what happens next."""

    id: str
    queue: str
    status: str
    next: str
    """One sentence: what happens next."""
    holds: list[Hold] = []
    holder: Holder | None = None
    served: bool | None = None
    """A live worker serves the task's queue (``None``: the store keeps no registry)."""
    attempts: Attempts


async def outlooks(
    storage: Storage, tasks: Sequence[Envelope], *, app: App | None = None
) -> list[Outlook]:
    """The outlook of each of ``tasks`` (one read of the clock, the registry, and the
    controls of each queue)."""
    now = await storage.now()
    try:
        _, workers = await worker_views(storage)
        registry = True
    except Unsupported:
        workers, registry = [], False
    configs = await _registered_max(storage) if registry else {}
    by_queue: dict[str, _Queue] = {}
    found: list[Outlook] = []
    for task in tasks:
        context = by_queue.get(task.queue)
        if context is None:
            context = by_queue[task.queue] = await _queue(storage, task.queue)
        found.append(_outlook(task, now, context, workers, registry, app, configs))
    return found


class _Queue(msgspec.Struct):
    breakers: list[flow.BreakerView]
    pauses: list[flow.PauseView]
    full: dict[str, str]


async def _queue(storage: Storage, queue: str) -> _Queue:
    try:
        breakers = await flow.breaker_views(storage, queue, count_held=False)
        pauses = await flow.pause_views(storage, queue, count_held=False)
        limits = await flow.limit_views(storage, queue, waiting=False)
    except Unsupported:
        return _Queue(breakers=[], pauses=[], full={})
    full: dict[str, str] = {}
    for view in limits:
        if view.concurrency is None:
            continue
        if view.kind != "value" and view.in_use >= view.concurrency:
            full[view.key] = f"full: {view.in_use} of {view.concurrency} run"
        for value in view.values:
            if value.in_use >= view.concurrency:
                full[value.key] = f"full: {value.in_use} of {view.concurrency} run"
    return _Queue(breakers=breakers, pauses=pauses, full=full)


async def _registered_max(storage: Storage) -> dict[str, int]:
    """The ``max_attempts`` live workers registered for their queues."""
    found: dict[str, int] = {}
    for info in await storage.list_workers():
        declared = info.extra.get("max_attempts")
        if isinstance(declared, dict):
            for queue, value in declared.items():
                if isinstance(value, int) and not isinstance(value, bool):
                    found.setdefault(str(queue), value)
    return found


def _outlook(
    task: Envelope,
    now: datetime,
    context: _Queue,
    workers: list[WorkerView],
    registry: bool,
    app: App | None,
    configs: dict[str, int],
) -> Outlook:
    served = (
        any(w.status == "live" and task.queue in w.queues for w in workers) if registry else None
    )
    breaker = next((b for b in context.breakers if b.key == flow.breaker_key(task)), None)
    attempts = _attempts(task, breaker, app, configs)
    holds: list[Hold] = []
    holder: Holder | None = None
    if task.status is Status.PENDING:
        holds = _holds(task, context)
        text = _pending(task, now, holds, served, attempts)
    elif task.status is Status.IN_FLIGHT:
        holder = _holder(task, now, workers, registry)
        text = _running(holder)
    elif task.status is Status.DEAD:
        text = (
            "nothing: it is dead-lettered and runs again only when redriven "
            f"(rdq dlq redrive {task.queue} {task.id})"
        )
    elif task.status is Status.SUCCEEDED:
        text = "nothing: it succeeded (it is deleted after its queue's task_ttl)"
    else:
        text = "nothing: it was cancelled and never runs"
    return Outlook(
        id=task.id,
        queue=task.queue,
        status=task.status.value,
        next=text,
        holds=holds,
        holder=holder,
        served=served,
        attempts=attempts,
    )


def _attempts(
    task: Envelope, breaker: flow.BreakerView | None, app: App | None, configs: dict[str, int]
) -> Attempts:
    free = uncharged(task, breaker.outages if breaker is not None else ())
    charged = task.attempt_count - free
    most: int | None = None
    if task.retry is not None and task.retry.max_attempts is not None:
        most = task.retry.max_attempts
    elif app is not None and (app.declares_queue(task.queue) or task.queue in app.queues):
        most = app.queue_config(task.queue).max_attempts
    else:
        most = configs.get(task.queue)
    left = max(most - charged, 0) if most is not None else None
    return Attempts(
        recorded=task.attempt_count, charged=charged, uncharged=free, max=most, left=left
    )


def _holds(task: Envelope, context: _Queue) -> list[Hold]:
    keys = set(task_keys(task))
    holds = [
        Hold(kind="pause", key=p.key, by=p.by, reason=p.reason, since=p.at)
        for p in context.pauses
        if p.key in keys
    ]
    for b in context.breakers:
        if b.state == "closed" or b.key not in keys:
            continue
        started = b.outages[-1].start if b.outages and b.outages[-1].end is None else b.since
        holds.append(
            Hold(
                kind="breaker",
                key=b.key,
                state=b.state,
                by=b.by,
                reason=b.reason,
                since=started,
                until=b.until,
                detail=b.error_type,
            )
        )
    holds += [
        Hold(kind="limit", key=key, detail=text)
        for key, text in context.full.items()
        if key in keys
    ]
    return holds


def _pending(
    task: Envelope, now: datetime, holds: list[Hold], served: bool | None, attempts: Attempts
) -> str:
    due = task.next_attempt_at
    when = "now" if due is None or due <= now else f"in {_span((due - now).total_seconds())}"
    number = attempts.charged + 1
    of = f" of {attempts.max}" if attempts.max is not None else ""
    if holds:
        first = holds[0]
        if first.kind == "pause":
            why = f"held: {first.key} is paused" + (f" by {first.by}" if first.by else "")
            return f"{why}; it runs once resumed (its attempts are kept)"
        if first.kind == "breaker":
            state = "open" if first.state == "open" else "half-open (probing)"
            probe = ""
            if first.state == "open":
                probe = (
                    ", until closed by hand"
                    if first.until is None
                    else f", probes in {_span((first.until - now).total_seconds())}"
                    if first.until > now
                    else ", probes now"
                )
            return (
                f"held: the breaker of {first.key} is {state}{probe}; it runs once the breaker "
                "lets it (no attempt is charged meanwhile)"
            )
        return f"waits: the limit of {first.key} is {first.detail}"
    if served is False:
        return f"due {when}, but no live worker serves queue {task.queue}: nobody claims it"
    return f"attempt {number}{of} is due {when}"


def _holder(task: Envelope, now: datetime, workers: list[WorkerView], registry: bool) -> Holder:
    lease_in = (
        (task.lease_expires_at - now).total_seconds() if task.lease_expires_at is not None else None
    )
    worker = next((w for w in workers if w.id == task.claimed_by), None)
    if worker is None:
        return Holder(worker=task.claimed_by, lease_in=lease_in)
    return Holder(
        worker=worker.id,
        status=worker.status,
        silent_for=worker.silent_for if worker.status == "silent" else None,
        lease_in=lease_in,
    )


def _running(holder: Holder) -> str:
    who = holder.worker or "a worker"
    if holder.status == "silent":
        who += f" (silent for {_span(holder.silent_for or 0.0)})"
    elif holder.status is None:
        who += " (not registered)"
    if holder.lease_in is None:
        return f"running on {who}"
    if holder.lease_in <= 0:
        return (
            f"its lease lapsed {_span(-holder.lease_in)} ago: another worker reclaims it at "
            f"its next claim (recorded as LEASE_EXPIRED); it was held by {who}"
        )
    lease = _span(holder.lease_in)
    if holder.status == "silent":
        return f"held by {who}: when its lease lapses in {lease}, another worker reclaims it"
    return f"running on {who}; its lease expires in {lease} unless renewed"


def _span(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 1:
        return "under a second"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
