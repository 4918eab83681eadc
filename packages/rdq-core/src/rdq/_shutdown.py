"""A stopping worker's last steps: give in-flight handlers their grace period, then interrupt
what still runs (recorded INTERRUPTED, due again at once) and wait briefly for the writes."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from rdq._runner import Run

__all__ = ["INTERRUPT_WAIT", "drain"]

INTERRUPT_WAIT = 10.0
"""Seconds a stopping worker waits for interrupted handlers to record INTERRUPTED."""


async def drain(
    runs: Sequence[Run],
    *,
    hurry: asyncio.Event | None,
    hurried: bool,
    grace_period: float,
    log: Any,
    worker_id: str,
) -> None:
    """Wait up to ``grace_period`` for ``runs`` to end (less if ``hurry`` is set, none if
    ``hurried`` already), then interrupt the handlers still running. Outcomes being written
    are left to finish; after ``INTERRUPT_WAIT`` more seconds what is left is abandoned (its
    lease will expire)."""
    pending = [run.task for run in runs if run.task is not None]
    if pending and not hurried:
        log.info(
            "waiting for in-flight tasks",
            worker_id=worker_id,
            count=len(pending),
            grace_period=grace_period,
        )
        stop_again = asyncio.ensure_future((hurry or asyncio.Event()).wait())
        all_done = asyncio.ensure_future(asyncio.wait(pending))
        try:
            await asyncio.wait(
                [all_done, stop_again], timeout=grace_period, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stop_again.cancel()
            all_done.cancel()
    left = [run for run in runs if run.task is not None and not run.task.done()]
    running = [run for run in left if not run.resolving]
    for run in running:  # outcomes being written are left to finish
        run.interrupted = True
        if run.task is not None:
            run.task.cancel()
    if running:
        log.warning(
            "interrupting tasks still running after the grace period",
            worker_id=worker_id,
            count=len(running),
        )
    tasks = [run.task for run in left if run.task is not None]
    if tasks:
        _, stuck = await asyncio.wait(tasks, timeout=INTERRUPT_WAIT)
        if stuck:  # handlers that swallow cancellation, or writes stuck in an outage
            for task in stuck:
                task.cancel()
            log.error(
                "abandoning tasks that did not finish; their leases will expire",
                worker_id=worker_id,
                count=len(stuck),
            )
