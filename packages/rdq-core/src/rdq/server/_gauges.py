"""The queue gauges a node serves at ``/metrics``, read from the store: so that a node that
runs no worker (``rdq server --no-work``, or one working other queues) still answers the
alerting recipe of docs/operations.md — ``rdq_pending``, ``rdq_in_flight``, ``rdq_dlq_depth``,
``rdq_oldest_pending_age_seconds`` of every queue, ``rdq_breaker_state`` of every breaker,
``rdq_held`` (what a pause or a breaker holds back) and ``rdq_paused``.

One read serves every scrape for :data:`TTL` seconds (concurrent scrapes share it): a scrape
every few seconds by several Prometheus servers costs the store one round of reads. A key
that is no longer paused, or a breaker no longer kept, leaves the gauges at the next read.
A store that cannot be read leaves the last values (the error is logged once per outage).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from rdq import metrics
from rdq.admin import TaskAdmin
from rdq.errors import Unsupported
from rdq.logging import get_logger
from rdq.spi import Stats

__all__ = ["TTL", "QueueGauges"]

TTL = 10.0
"""Seconds one read of the store serves the scrapes."""
_STATE = {"closed": 0, "half_open": 1, "open": 2}
_log = get_logger("rdq.server")

Labels = tuple[str, ...]


class QueueGauges:
    """Sets the queue, breaker and pause gauges from the store, at most every :data:`TTL`."""

    def __init__(self, admin: TaskAdmin, queues: Callable[[], Awaitable[list[Stats]]]) -> None:
        self.admin = admin
        self._queues = queues
        self._read_at = float("-inf")
        self._lock = asyncio.Lock()
        self._published: dict[str, set[Labels]] = {}
        self._failing = False

    async def refresh(self) -> None:
        """Read the store again if the last read is older than :data:`TTL`."""
        async with self._lock:
            if time.monotonic() - self._read_at < TTL:
                return
            try:
                await self._read()
                self._failing = False
            except Exception as exc:  # a scrape never fails on the store: the last values stay
                if not self._failing:
                    _log.warning("/metrics: cannot read the queue gauges", error=str(exc))
                    self._failing = True
            self._read_at = time.monotonic()

    async def _read(self) -> None:
        stats = await self._queues()
        current: dict[str, set[Labels]] = {"queue": set(), "breaker": set(), "held": set()}
        current["paused"] = set()
        for s in stats:
            metrics.PENDING.labels(s.queue).set(s.pending)
            metrics.IN_FLIGHT.labels(s.queue).set(s.in_flight)
            metrics.DLQ_DEPTH.labels(s.queue).set(s.dlq_depth)
            metrics.OLDEST_PENDING_AGE.labels(s.queue).set(s.oldest_pending_age or 0.0)
            current["queue"].add((s.queue,))
        try:
            breakers = await self.admin.breakers()
            pauses = await self.admin.pauses()
        except Unsupported:
            breakers, pauses = [], []
        for b in breakers:
            metrics.BREAKER_STATE.labels(b.queue, b.key).set(_STATE.get(b.state, 0))
            current["breaker"].add((b.queue, b.key))
            if b.state != "closed" and b.held is not None:
                metrics.HELD.labels(b.queue, b.key, "breaker").set(b.held)
                current["held"].add((b.queue, b.key, "breaker"))
        for p in pauses:
            metrics.PAUSED.labels(p.queue, p.key).set(1)
            current["paused"].add((p.queue, p.key))
            if p.held is not None:
                metrics.HELD.labels(p.queue, p.key, "pause").set(p.held)
                current["held"].add((p.queue, p.key, "pause"))
        self._forget(current)

    def _forget(self, current: dict[str, set[Labels]]) -> None:
        """Take out the label sets the last read published and this one did not."""
        gauges = {
            "queue": (
                metrics.PENDING,
                metrics.IN_FLIGHT,
                metrics.DLQ_DEPTH,
                metrics.OLDEST_PENDING_AGE,
            ),
            "breaker": (metrics.BREAKER_STATE,),
            "held": (metrics.HELD,),
            "paused": (metrics.PAUSED,),
        }
        for kind, labels in current.items():
            for gone in self._published.get(kind, set()) - labels:
                for gauge in gauges[kind]:
                    try:
                        gauge.remove(*gone)
                    except KeyError:
                        continue
            self._published[kind] = labels
