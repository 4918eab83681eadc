"""``wait_due`` by change stream: wake when a task of the queue may have become due.

Change streams need a replica set (a single-node one will do) or mongos; on a standalone
``mongod`` the store does not advertise ``notify`` and the engine polls.

The stream is opened *before* the store is asked when the next task falls due, so an enqueue
that lands between the two is never missed. Events that wake a waiter: an insert into the
queue (an enqueue), and any update that sets a task PENDING (reschedule, redrive; the
update does not carry the queue, so this can wake a waiter of another queue: wake-ups may be
spurious). Tasks that become due by the passing of time (a delay or a lease running out) are
covered by never waiting past the next due time the server reports.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any

from rdq.spi import Status
from rdq_mongo._pipelines import NOW_US

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

__all__ = ["seconds_until_due", "supports_change_streams", "wait_for_due"]

_MAX_AWAIT_MS = 1000


def supports_change_streams(hello: dict[str, Any]) -> bool:
    """True if the server that sent this ``hello`` reply can serve change streams."""
    return bool(hello.get("setName")) or hello.get("msg") == "isdbgrid"


async def seconds_until_due(tasks: AsyncCollection[dict[str, Any]], queue: str) -> float | None:
    """Seconds (server clock) until the next task of ``queue`` is due, 0 or less if one is
    due now, ``None`` if none is scheduled."""
    pipeline: list[dict[str, Any]] = [
        {
            "$match": {
                "queue": queue,
                "status": {"$in": [Status.PENDING.value, Status.IN_FLIGHT.value]},
            }
        },
        {"$sort": {"due": 1}},
        {"$limit": 1},
        {"$project": {"wait": {"$subtract": ["$due", NOW_US]}}},
    ]
    async for row in await tasks.aggregate(pipeline):
        wait = row.get("wait")
        if isinstance(wait, int | float):
            return float(wait) / 1_000_000
    return None


async def wait_for_due(tasks: AsyncCollection[dict[str, Any]], queue: str, timeout: float) -> bool:
    """Block until a task of ``queue`` may be due (True) or ``timeout`` seconds pass (False)."""
    loop = asyncio.get_running_loop()
    pipeline = [
        {
            "$match": {
                "$or": [
                    {"operationType": "insert", "fullDocument.queue": queue},
                    {
                        "operationType": "update",
                        "updateDescription.updatedFields.status": Status.PENDING.value,
                    },
                ]
            }
        }
    ]
    await_ms = max(1, min(_MAX_AWAIT_MS, math.ceil(timeout * 1000)))
    async with await tasks.watch(pipeline, max_await_time_ms=await_ms) as stream:
        wait = await seconds_until_due(tasks, queue)
        if wait is not None and wait <= 0:
            return True
        limit = timeout if wait is None else min(timeout, wait)
        end = loop.time() + limit
        while loop.time() < end:
            if await stream.try_next() is not None:
                return True
    return wait is not None and wait <= timeout
