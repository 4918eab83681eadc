"""Lease heartbeats: the leases of claimed tasks are renewed while their handlers run.

A lease is renewed when a third of it has passed, so two renewals can fail before it expires.
Renewals are made by the worker's lease thread (:mod:`rdq.worker._watchdog`), with a store of its
own on its own event loop, so a handler that blocks the worker's loop does not cost the other tasks
their leases; where the worker has no such store (a store that cannot ``reopen``, or whose second
store does not reach the same tasks), :func:`heartbeat_loop` renews them on the worker's loop.

A renewal refused with ``StaleClaim`` (or ``NotFound``) means the task is no longer this
worker's (an operator cancelled it, or its lease lapsed and another worker took it): the
handler is abandoned (cancelled, or, in a thread, fenced off) and its outcome is never
written. Leases are renewed while an outcome is being written too (a write retried through an
outage, or a completion waiting for its batch); a refusal then only stops those retries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from rdq import metrics
from rdq.errors import NotFound, StaleClaim
from rdq.spi import Storage
from rdq.worker._clock import StorageClock
from rdq.worker._run import Run

__all__ = ["FENCE_AFTER", "LostLease", "due_for_renewal", "heartbeat_loop", "renew"]

MAX_TICK = 1.0
MIN_TICK = 0.02
FENCE_AFTER = 2.0
"""Seconds past its timeout after which a handler that ignored cancellation is fenced off."""

LostLease = Callable[[Run, Exception], None]
"""Told of a run whose renewal was refused (``StaleClaim`` or ``NotFound``) while its handler
still runs; called on the thread that renewed."""


def due_for_renewal(runs: Iterable[Run], now: float, tick: float) -> tuple[list[Run], float]:
    """The runs whose lease should be renewed now, and how long to sleep before looking
    again (at most ``tick``)."""
    due: list[Run] = []
    for run in runs:
        if run.done or run.lost or run.fenced:
            continue
        tick = min(tick, run.lease / 6.0)
        if run.renew_at <= now:
            due.append(run)
    return due, max(MIN_TICK, tick)


async def renew(
    storage: Storage, clock: StorageClock, run: Run, worker_id: str, log: Any, lost: LostLease
) -> None:
    """Extend ``run``'s lease by its length; a refusal marks the run lost and tells ``lost``."""
    task = run.claimed.task
    lease = timedelta(seconds=run.lease)
    sent = clock.mono()
    try:
        expires = await storage.extend_lease(task.id, run.claimed.token, lease)
    except (StaleClaim, NotFound) as exc:
        if run.done:
            return
        run.lost = True
        if run.resolving:  # its outcome may just have been recorded: that write reports it
            return
        lost(run, exc)
        return
    except Exception as exc:  # an outage: try again soon, the lease has time left
        metrics.STORAGE_ERRORS.labels("extend_lease").inc()
        run.renew_at = clock.mono() + min(1.0, run.lease / 10.0)
        log.warning(
            "could not renew a lease",
            task_id=task.id,
            queue=run.queue,
            attempt=task.attempt_count + 1,
            worker_id=worker_id,
            error=str(exc),
        )
        return
    clock.observe(expires - lease, sent, clock.mono())
    run.renew_at = sent + run.lease / 3.0


async def heartbeat_loop(
    storage: Storage,
    clock: StorageClock,
    runs: Callable[[], Iterable[Run]],
    worker_id: str,
    log: Any,
    shortest_lease: Callable[[], float],
    fence: Callable[[Run], None],
    lost: LostLease,
    renewed_elsewhere: Callable[[], bool],
) -> None:
    """On the worker's loop, forever (cancel the task to stop it): fence off handlers still
    running ``FENCE_AFTER`` seconds past their timeout (they swallowed the cancellation), and
    renew due leases unless ``renewed_elsewhere()`` (the lease thread does it).
    ``shortest_lease()`` is the shortest lease a new claim may get, so a fresh claim is never
    missed for long."""
    while True:
        # one round in a call of its own, so that no run is referenced while the loop sleeps
        # (a finished task's payload is freed at once, not a tick later)
        tick = await _round(
            storage, clock, runs, worker_id, log, shortest_lease, fence, lost, renewed_elsewhere
        )
        await asyncio.sleep(tick)


async def _round(
    storage: Storage,
    clock: StorageClock,
    runs: Callable[[], Iterable[Run]],
    worker_id: str,
    log: Any,
    shortest_lease: Callable[[], float],
    fence: Callable[[Run], None],
    lost: LostLease,
    renewed_elsewhere: Callable[[], bool],
) -> float:
    """Fence and renew what is due now; the seconds until the next round."""
    now = clock.mono()
    tick = min(MAX_TICK, shortest_lease() / 6.0)
    live: list[Run] = []
    for run in runs():
        if run.done or run.lost or run.fenced:
            continue
        if run.deadline + FENCE_AFTER < now and not run.resolving:
            fence(run)  # the handler did not stop when its timeout cancelled it
            continue
        live.append(run)
    due, tick = due_for_renewal(live, now, tick)
    if due and not renewed_elsewhere():
        await asyncio.gather(*(renew(storage, clock, run, worker_id, log, lost) for run in due))
    return tick
