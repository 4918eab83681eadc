"""Lease heartbeats: one loop per worker renews the leases of long-running handlers.

A lease is renewed when a third of it has passed, so two renewals can fail before it expires.
A renewal refused with ``StaleClaim`` (or ``NotFound``) means another worker owns the task now:
the handler is cancelled (or, in a thread, fenced off) and its outcome is never written.
Leases are renewed while an outcome is being written too (a write retried through an outage,
or a completion waiting for its batch); a refusal then only stops those retries.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from rdq import metrics
from rdq._clock import StorageClock
from rdq._runner import Run
from rdq.errors import NotFound, StaleClaim
from rdq.spi import Storage

__all__ = ["heartbeat_loop"]

MAX_TICK = 1.0
MIN_TICK = 0.02
FENCE_AFTER = 2.0
"""Seconds past its timeout after which a handler that ignored cancellation is fenced off."""


async def heartbeat_loop(
    storage: Storage,
    clock: StorageClock,
    runs: Callable[[], Iterable[Run]],
    worker_id: str,
    log: Any,
    shortest_lease: Callable[[], float],
    fence: Callable[[Run], None],
) -> None:
    """Renew due leases forever (cancel the task to stop it). ``shortest_lease()`` is the
    shortest lease a new claim may get, so a fresh claim is never missed for long.
    ``fence(run)`` is called for a handler still running ``FENCE_AFTER`` seconds past its
    timeout (it swallowed the cancellation)."""
    while True:
        now = time.monotonic()
        tick = min(MAX_TICK, shortest_lease() / 6.0)
        due: list[Run] = []
        for run in runs():
            if run.done or run.lost or run.fenced:
                continue
            if run.deadline + FENCE_AFTER < now:
                fence(run)  # the handler did not stop when its timeout cancelled it
                continue
            tick = min(tick, run.lease / 6.0)
            if run.renew_at <= now:
                due.append(run)
        if due:
            await asyncio.gather(*(_renew(storage, clock, run, worker_id, log) for run in due))
        await asyncio.sleep(max(MIN_TICK, tick))


async def _renew(storage: Storage, clock: StorageClock, run: Run, worker_id: str, log: Any) -> None:
    task = run.claimed.task
    lease = timedelta(seconds=run.lease)
    sent = time.monotonic()
    try:
        expires = await storage.extend_lease(task.id, run.claimed.token, lease)
    except (StaleClaim, NotFound) as exc:
        if run.done:
            return
        run.lost = True
        if run.resolving:  # its outcome may just have been recorded: that write reports it
            return
        metrics.STALE_CLAIMS.labels(run.queue).inc()
        log.warning(
            "lease lost; abandoning the handler",
            task_id=task.id,
            queue=run.queue,
            attempt=task.attempt_count + 1,
            worker_id=worker_id,
            reason=type(exc).__name__,
        )
        if run.task is not None:
            run.task.cancel()
        return
    except Exception as exc:  # an outage: try again soon, the lease has time left
        metrics.STORAGE_ERRORS.labels("extend_lease").inc()
        run.renew_at = time.monotonic() + min(1.0, run.lease / 10.0)
        log.warning(
            "could not renew a lease",
            task_id=task.id,
            queue=run.queue,
            attempt=task.attempt_count + 1,
            worker_id=worker_id,
            error=str(exc),
        )
        return
    received = time.monotonic()
    clock.observe(expires - lease, sent, received)
    run.renew_at = sent + run.lease / 3.0
