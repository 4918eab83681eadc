"""The worker's side of limits that hold across the fleet (:mod:`rdq.flow`).

The store enforces them in its claims; the worker keeps the control records saying what to
enforce:

- at start, and whenever its app's queues or handlers change, it reads its declarations (the
  store's time of that read is their ``declared_at``), and at every refresh of the controls
  (each second) writes the limits of every key its app declares for the queues it serves —
  those of the queue's and the handlers' keys, of the named keys, and of each per-value key
  a submitter created — where the record holds something else, and lifts those its app no
  longer declares (only of the queue, if its app declares the queue, and of handlers it
  has); each by compare-and-set, never over a later declaration (:func:`rdq.flow.declare`);
- a ``RetryAfter`` on a task lowers the adaptive rate limits of its keys, and a lowered rate
  whose time has passed is restored (:func:`rdq.flow.lower`, :func:`rdq.flow.restore`);
- the limits' gauges follow each refresh (:mod:`rdq.metrics`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from rdq import flow, metrics
from rdq.app import App
from rdq.errors import ControlConflict
from rdq.retry import Decision
from rdq.spi import Control, Envelope, Storage, task_keys
from rdq.worker._clock import StorageClock

__all__ = ["LimitKeeper", "publish_limits"]

Apply = Callable[[str, str, Callable[[Control], Control | None]], Awaitable[Control | None]]


class LimitKeeper:
    """The declared limits of one worker's queues, kept in the store's control records."""

    def __init__(
        self,
        app: App,
        storage: Storage,
        clock: StorageClock,
        worker_id: str,
        log: Any,
        apply: Apply,
    ) -> None:
        self.app = app
        self.storage = storage
        self.clock = clock
        self.worker_id = worker_id
        self.log = log
        self.apply = apply
        self._revision = -1
        self._declared_at: datetime | None = None
        self._warned = False

    @property
    def declared_at(self) -> datetime:
        """The store time at which this worker read its declarations (again when its app
        changed)."""
        if self._declared_at is None or self.app.revision != self._revision:
            self._revision = self.app.revision
            self._declared_at = self.clock.now()
        return self._declared_at

    def limited(self, queue: str) -> bool:
        """True when the app declares limits for ``queue``."""
        return not self.app.limit_plan(queue).empty

    def refill_time(self, queue: str) -> float:
        """Seconds in which the emptied bucket of the fastest rate limit of ``queue`` holds a
        claim's worth again (``inf``: no rate limit): a worker whose claim came back empty
        tries again within that."""
        return self.app.limit_plan(queue).refill_time()

    def warn_unenforced(self, queues: list[str]) -> None:
        """Say once that limits are declared but the store cannot hold them."""
        if self._warned:
            return
        declared = [q for q in queues if not self.app.limit_plan(q).empty]
        if declared:
            self._warned = True
            self.log.warning(
                "limits are declared but the store keeps no control records: they are not "
                "enforced (a store of contract version 3 with the capability 'control' is "
                "needed)",
                queues=declared,
                worker_id=self.worker_id,
            )

    async def reconcile(self, queue: str, controls: dict[str, Control]) -> None:
        """Bring the limits of ``queue``'s records in line with the app's declarations (see
        the module's docstring); then restore lowered rates whose time has passed and set the
        gauges. ``controls``: the queue's records as just read."""
        plan = self.app.limit_plan(queue)
        at = self.declared_at
        for key, exact in plan.exact.items():
            await self._declare(queue, key, exact, controls.get(key), at)
        for control in list(controls.values()):
            if control.key in plan.exact:
                continue
            spec = plan.spec_of(control.key)
            if spec is not None:
                await self._declare(queue, control.key, spec, control, at)
            elif self._owns(queue, flow.limit_of(control)):
                await self._undeclare(queue, control, at)
        now = self.clock.now()
        for control in list(controls.values()):
            lowered = flow.lowered_of(control)
            if lowered is not None and lowered.until <= now:
                restored = await self.apply(
                    queue, control.key, functools.partial(_restore, clock=self.clock)
                )
                if restored is not None:
                    self.log.info(
                        "rate limit restored", queue=queue, key=control.key, rate=restored.rate
                    )
        publish_limits(queue, flow.limit_views_of(queue, list(controls.values())))

    async def _declare(
        self,
        queue: str,
        key: str,
        spec: flow.KeyedLimit,
        control: Control | None,
        at: datetime,
    ) -> None:
        if control is not None and flow.declare(control, spec, at, self.worker_id) is None:
            return  # the cheap common case: nothing to write
        stored = await self.apply(queue, key, lambda c: flow.declare(c, spec, at, self.worker_id))
        if stored is not None:
            self.log.info(
                "limit declared",
                queue=queue,
                key=key,
                concurrency=stored.concurrency,
                rate=stored.rate,
                per=stored.per,
                worker_id=self.worker_id,
            )

    async def _undeclare(self, queue: str, control: Control, at: datetime) -> None:
        stored = await self.apply(queue, control.key, lambda c: flow.undeclare(c, at))
        if stored is None:
            return
        self.log.info("limit lifted", queue=queue, key=control.key, worker_id=self.worker_id)
        if flow.holds_nothing(stored):
            with contextlib.suppress(ControlConflict):  # changed meanwhile: it stays
                await self.storage.delete_control(
                    queue, control.key, expected_version=stored.version
                )

    def _owns(self, queue: str, stored: flow.LimitState | None) -> bool:
        """True when this worker's app may lift ``stored``: it declares the queue, or has a
        handler that declared it."""
        if stored is None:
            return False
        for source in stored.sources:
            if source == "queue" and self.app.declares_queue(queue):
                return True
            ref = source.removeprefix("handler:")
            if source.startswith("handler:") and ref in self.app.handler_names:
                return True
        return False

    async def record(self, task: Envelope, decision: Decision) -> None:
        """A handler raised ``RetryAfter`` on ``task``: lower the adaptive rate limits of its
        keys for that long."""
        delay = decision.retry_after
        if delay is None or delay <= 0:
            return
        plan = self.app.limit_plan(task.queue)
        if plan.empty:
            return
        for key in task_keys(task):
            spec = plan.spec_of(key)
            if spec is None or spec.rate is None or not spec.adaptive:
                continue
            stored = await self.apply(
                task.queue,
                key,
                functools.partial(
                    _lower,
                    clock=self.clock,
                    delay=delay,
                    claimed_at=task.claimed_at,
                    error=decision.error_message,
                ),
            )
            if stored is None:
                continue
            lowered = flow.lowered_of(stored)
            metrics.LIMIT_LOWERED.labels(task.queue, spec.name).inc()
            self.log.warning(
                "rate limit lowered: a handler asked to retry later",
                queue=task.queue,
                key=key,
                rate=stored.rate,
                per=stored.per,
                until=lowered.until.isoformat() if lowered is not None else None,
                task_id=task.id,
                worker_id=self.worker_id,
            )


_PUBLISHED: dict[str, set[str]] = {}
_GAUGES = (
    metrics.LIMIT_CONCURRENCY,
    metrics.LIMIT_IN_USE,
    metrics.LIMIT_SATURATED,
    metrics.LIMIT_KEYS,
    metrics.LIMIT_RATE,
    metrics.LIMIT_WAITING,
)


def publish_limits(queue: str, views: list[flow.LimitView]) -> None:
    """Set the limit gauges of ``queue`` from ``views`` (waiting only where counted); the
    gauges of a limit no longer declared are removed."""
    names = {v.name for v in views}
    for gone in _PUBLISHED.get(queue, set()) - names:
        for gauge in _GAUGES:
            with contextlib.suppress(KeyError):
                gauge.remove(queue, gone)
    _PUBLISHED[queue] = names
    for view in views:
        labels = (queue, view.name)
        if view.concurrency is not None:
            metrics.LIMIT_CONCURRENCY.labels(*labels).set(view.concurrency)
        metrics.LIMIT_IN_USE.labels(*labels).set(view.in_use)
        metrics.LIMIT_SATURATED.labels(*labels).set(view.saturated)
        metrics.LIMIT_KEYS.labels(*labels).set(view.keys)
        rate, per = (
            (view.current_rate, view.current_per) if view.kind != "value" else (view.rate, view.per)
        )
        if rate is not None:
            metrics.LIMIT_RATE.labels(*labels).set(rate / per)
        if view.waiting is not None:
            metrics.LIMIT_WAITING.labels(*labels).set(view.waiting)


def _lower(
    control: Control,
    *,
    clock: StorageClock,
    delay: float,
    claimed_at: datetime | None,
    error: str | None,
) -> Control | None:
    return flow.lower(control, clock.now(), delay, claimed_at, error)


def _restore(control: Control, *, clock: StorageClock) -> Control | None:
    return flow.restore(control, clock.now())
