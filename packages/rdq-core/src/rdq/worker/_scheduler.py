"""The worker's scheduler: enqueues each tick of the schedules whose queue it serves (the rules
are in :mod:`rdq.schedules`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from rdq.app import App
from rdq.client import Client
from rdq.schedules import MAX_SLEEP, SCHEDULE_HEADER, TICK_HEADER, Schedule, decide

__all__ = ["schedule_loop"]


async def schedule_loop(
    app: App,
    client: Client,
    now: Callable[[], Any],
    queues: Sequence[str],
    log: Any,
) -> None:
    """Run the schedules of ``app`` whose queue is in ``queues``, forever (cancel to stop).
    ``now()`` reads the storage clock. Outages are logged and retried."""
    handled: dict[str, datetime] = {}
    while True:
        schedules = [s for s in app.schedules.values() if app.schedule_queue(s) in queues]
        if not schedules:
            return
        try:
            current: datetime = await now()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("schedules: cannot read the storage clock; retrying", error=str(exc))
            await asyncio.sleep(1.0)
            continue
        wake = current + timedelta(seconds=MAX_SLEEP)
        retry = current + timedelta(seconds=1)
        for schedule in schedules:
            queue = app.schedule_queue(schedule)
            tick, missed = decide(
                schedule, current, handled.get(schedule.name), app.queue_config(queue).task_ttl
            )
            if missed:
                last = schedule.last_tick(current)
                if last is not None:
                    handled[schedule.name] = last
                log.info(
                    "schedule: missed tick dropped (catch_up='skip', or older than task_ttl)",
                    schedule=schedule.name,
                    tick=last.isoformat() if last else None,
                )
            elif tick is not None:
                if await _enqueue(client, schedule, queue, tick, log):
                    handled[schedule.name] = tick
                else:
                    wake = min(wake, retry)
            following = schedule.next_tick(current)
            if following is not None:
                wake = min(wake, following)
        await asyncio.sleep(max(0.01, (wake - current).total_seconds()))


async def _enqueue(
    client: Client, schedule: Schedule, queue: str, tick: datetime, log: Any
) -> bool:
    """Enqueue the task of ``tick``; False (logged) if the store failed."""
    try:
        submitted = await client.submit(
            schedule.handler,
            schedule.payload,
            queue=queue,
            id=schedule.task_id(tick),
            headers={SCHEDULE_HEADER: schedule.name, TICK_HEADER: tick.isoformat()},
            check_handler=False,
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.warning(
            "schedule: could not enqueue a tick; retrying",
            schedule=schedule.name,
            tick=tick.isoformat(),
            error=str(exc),
        )
        return False
    if submitted.created:
        log.info(
            "schedule: tick enqueued",
            schedule=schedule.name,
            tick=tick.isoformat(),
            task_id=submitted.id,
            queue=queue,
        )
    return True
