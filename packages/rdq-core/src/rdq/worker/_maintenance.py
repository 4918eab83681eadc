"""Periodic upkeep a worker does beside its handlers: queue statistics for the metrics gauges
and deletion of succeeded tasks older than their queue's ``task_ttl``.

Cut-offs are computed on the storage's clock (learned from ``Stats.as_of`` and from claims),
never from the local wall clock, so a skewed worker never purges early.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from rdq import flow, metrics
from rdq.app import App
from rdq.spi import Stats, Storage
from rdq.worker._clock import StorageClock
from rdq.worker._fleet import Fleet
from rdq.worker._limits import publish_limits

__all__ = ["maintenance_loop", "publish_stats", "purge_expired"]


def publish_stats(stats: Stats) -> None:
    """Set the queue gauges from one ``Stats`` snapshot."""
    queue = stats.queue
    metrics.PENDING.labels(queue).set(stats.pending)
    metrics.IN_FLIGHT.labels(queue).set(stats.in_flight)
    metrics.DLQ_DEPTH.labels(queue).set(stats.dlq_depth)
    metrics.OLDEST_PENDING_AGE.labels(queue).set(stats.oldest_pending_age or 0.0)


async def refresh_stats(storage: Storage, queues: Sequence[str], clock: StorageClock) -> None:
    """Read every queue's stats, feed the gauges and the storage-clock estimate."""
    for queue in queues:
        sent = clock.mono()
        stats = await storage.stats(queue)
        clock.observe(stats.as_of, sent, clock.mono())
        publish_stats(stats)


async def refresh_limits(app: App, storage: Storage, queues: Sequence[str]) -> None:
    """Count what waits on each declared limit of ``queues`` into the gauges (one page of due
    tasks per queue that has limits; nothing without ``control``)."""
    if not storage.capabilities().control:
        return
    for queue in queues:
        if app.limit_plan(queue).empty:
            continue
        views = flow.limit_views_of(queue, await storage.list_controls(queue))
        publish_limits(queue, await flow.count_waiting(storage, queue, views))


async def purge_expired(
    app: App, storage: Storage, queues: Sequence[str], clock: StorageClock
) -> int:
    """Delete succeeded tasks older than each queue's ``task_ttl``; return how many."""
    total = 0
    for queue in queues:
        ttl = app.queue_config(queue).task_ttl
        cutoff = clock.now() - timedelta(seconds=ttl)
        count = await storage.purge_succeeded(queue, cutoff)
        if count:
            metrics.SUCCEEDED_PURGED.labels(queue).inc(count)
        total += count
    return total


async def maintenance_loop(
    app: App,
    storage: Storage,
    queues: Sequence[str],
    clock: StorageClock,
    log: Any,
    *,
    stats_interval: float = 15.0,
    purge_interval: float = 60.0,
    fleet: Fleet | None = None,
) -> None:
    """Refresh stats every ``stats_interval`` and purge expired tasks (and, with ``fleet``,
    silent workers and old counts) every ``purge_interval`` seconds, forever (cancel to stop).
    Errors are logged, not raised."""
    next_purge = clock.mono() + min(purge_interval, stats_interval)
    while True:
        try:
            await refresh_stats(storage, queues, clock)
            await refresh_limits(app, storage, queues)
            if clock.mono() >= next_purge:
                next_purge = clock.mono() + purge_interval
                purged = await purge_expired(app, storage, queues, clock)
                if purged:
                    log.info("purged succeeded tasks past their task_ttl", count=purged)
                if fleet is not None:
                    await fleet.upkeep()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            metrics.STORAGE_ERRORS.labels("maintenance").inc()
            log.warning("maintenance failed; will retry", error=str(exc))
        await asyncio.sleep(stats_interval)
