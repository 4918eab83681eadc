"""A stopping worker's last steps: give in-flight handlers their grace period, then interrupt
what still runs (recorded INTERRUPTED, due again at once) and wait briefly for the writes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from rdq.worker._run import Run

__all__ = ["INTERRUPT_WAIT", "drain"]

INTERRUPT_WAIT = 10.0
"""Seconds a stopping worker waits for interrupted handlers to record INTERRUPTED."""

_SLOT_WAIT = 0.01
"""How often a stopping worker looks again for a slot for the tasks it claimed ahead."""


async def drain(
    held: Callable[[], Sequence[Run]],
    unstarted: Callable[[], Sequence[Run]],
    start: Callable[[Run], None],
    *,
    hurry: asyncio.Event | None,
    hurried: bool,
    grace_period: float,
    log: Any,
    worker_id: str,
) -> None:
    """Wait up to ``grace_period`` for the ``held()`` runs to end (less if ``hurry`` is set,
    none if ``hurried`` already) — runs claimed ahead keep starting as slots free meanwhile —
    then interrupt the handlers still running and take the ``unstarted()`` runs out of their
    queue, to be ``start``ed as interrupted (they write INTERRUPTED without running).
    Outcomes being written are left to finish; after ``INTERRUPT_WAIT`` more seconds what is
    left is abandoned (its lease will expire)."""
    loop = asyncio.get_running_loop()
    if not hurried and _unfinished(held()):
        log.info(
            "waiting for in-flight tasks",
            worker_id=worker_id,
            count=len(_unfinished(held())),
            grace_period=grace_period,
        )
        stop_again = asyncio.ensure_future((hurry or asyncio.Event()).wait())
        until = loop.time() + grace_period
        try:
            while not stop_again.done():
                runs = held()
                remaining = until - loop.time()
                if remaining <= 0 or not runs:
                    break
                pending = _unfinished(runs)
                if pending:
                    await asyncio.wait(
                        [*pending, stop_again],
                        timeout=remaining,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                elif any(run.task is None for run in runs):
                    # claimed ahead, their slots held by writes about to return
                    await asyncio.sleep(min(remaining, _SLOT_WAIT))
                else:
                    break
        finally:
            stop_again.cancel()
    waiting = list(unstarted())
    runs = held()
    left = [run for run in runs if run.task is not None and not run.task.done()]
    running = [run for run in left if not run.resolving]
    for run in running:  # outcomes being written are left to finish
        run.interrupted = True
        if run.task is not None:
            run.task.cancel()
    if running or waiting:
        log.warning(
            "interrupting tasks still running after the grace period",
            worker_id=worker_id,
            count=len(running),
            claimed_ahead=len(waiting),
        )
    for run in waiting:  # never started: recorded INTERRUPTED, due again at once
        run.interrupted = True
        start(run)
    tasks = [run.task for run in [*left, *waiting] if run.task is not None]
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


def _unfinished(runs: Sequence[Run]) -> list[asyncio.Task[None]]:
    """The tasks of ``runs`` whose handler or write is still going (runs claimed ahead have
    no task until they start; runs waiting for a batched write have one that ended)."""
    return [run.task for run in runs if run.task is not None and not run.task.done()]
