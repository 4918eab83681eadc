"""Periodic upkeep a worker does beside its handlers: queue statistics for the metrics gauges,
deletion of succeeded tasks older than their queue's ``task_ttl``, and retention (DEAD tasks
past a queue's ``dead_ttl``, and finished ones past ``task_ttl`` when the queue archives them:
each written to the app's archive before it leaves, see :mod:`rdq.retention`), and the sweep
of payload blobs no task refers to any more (see :mod:`rdq.blobs`).

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
from rdq.blobs import sweep
from rdq.retention import Expiry, retain
from rdq.spi import Stats, Status, Storage
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
    app: App,
    storage: Storage,
    queues: Sequence[str],
    clock: StorageClock,
    *,
    runner: str = "rdq-worker",
    log: Any = None,
) -> int:
    """Remove the finished tasks of ``queues`` past their time: SUCCEEDED and CANCELLED ones
    older than ``task_ttl`` (archived first when the queue says ``archive_succeeded``), DEAD
    ones older than ``dead_ttl`` when it is set (always archived first). Return how many
    left the store. A queue whose round fails is logged (with ``log``; without, the first
    failure is raised once every queue had its round) and the others go on."""
    total = 0
    failed: Exception | None = None
    for queue in queues:
        try:
            total += await _expire_queue(app, storage, queue, clock, runner, log)
        except Exception as exc:
            failed = failed or exc
            if log is not None:
                log.warning(
                    "retention failed; nothing unarchived was removed",
                    queue=queue,
                    error=f"{type(exc).__name__}: {exc}",
                )
    if failed is not None and log is None:  # nobody to tell: the caller is
        raise failed
    return total


async def _expire_queue(
    app: App, storage: Storage, queue: str, clock: StorageClock, runner: str, log: Any
) -> int:
    config = app.queue_config(queue)
    now = clock.now()
    expiries: list[Expiry] = []
    if config.dead_ttl is not None:
        expiries.append(
            Expiry(
                Status.DEAD, now - timedelta(seconds=config.dead_ttl), _ttl("dead", config.dead_ttl)
            )
        )
    finished_cutoff = now - timedelta(seconds=config.task_ttl)
    count = 0
    if config.archive_succeeded and storage.capabilities().task_listing:
        why = _ttl("task", config.task_ttl)
        expiries += [
            Expiry(Status.SUCCEEDED, finished_cutoff, why),
            Expiry(Status.CANCELLED, finished_cutoff, why),
        ]
    elif config.archive_succeeded:
        if log is not None:  # never deleted unarchived: kept until the store can list them
            log.warning(
                "archive_succeeded needs a store that lists tasks (task_listing); "
                "finished tasks are kept",
                queue=queue,
            )
    else:
        count = await storage.purge_succeeded(queue, finished_cutoff)
        if count:
            metrics.SUCCEEDED_PURGED.labels(queue).inc(count)
    if expiries:
        blobs = app.blobs if storage.capabilities().payload_refs else None
        done = await retain(
            storage, app.archive, queue, expiries, runner=runner, now=now, log=log, blobs=blobs
        )
        if done is not None:
            count += done.count
    return count


def _ttl(which: str, seconds: float) -> str:
    days = seconds / 86400
    shown = f"{days:g}d" if days >= 1 and days == int(days) else f"{seconds:g}s"
    return f"{which}_ttl {shown}"


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
    runner: str = "rdq-worker",
) -> None:
    """Refresh stats every ``stats_interval`` and purge expired tasks (and, with ``fleet``,
    silent workers and old counts) every ``purge_interval`` seconds, forever (cancel to stop).
    ``runner`` (the worker's id) takes each queue's retention record for its rounds. Errors
    are logged, not raised."""
    next_purge = clock.mono() + min(purge_interval, stats_interval)
    next_sweep = clock.mono() + min(purge_interval, stats_interval)
    while True:
        try:
            await refresh_stats(storage, queues, clock)
            await refresh_limits(app, storage, queues)
            if clock.mono() >= next_purge:
                next_purge = clock.mono() + purge_interval
                purged = await purge_expired(app, storage, queues, clock, runner=runner, log=log)
                if purged:
                    log.info("purged succeeded tasks past their task_ttl", count=purged)
                if fleet is not None:
                    await fleet.upkeep()
            if clock.mono() >= next_sweep and storage.capabilities().payload_refs:
                blobs = app.blobs
                next_sweep = clock.mono() + blobs.sweep_interval
                swept = await sweep(storage, blobs.store, grace=blobs.grace)
                if swept.deleted:
                    log.info("deleted payload blobs no task refers to", count=swept.deleted)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            metrics.STORAGE_ERRORS.labels("maintenance").inc()
            log.warning("maintenance failed; will retry", error=str(exc))
        await asyncio.sleep(stats_interval)
