"""``wait_due``: wake when a task of the queue may have become due.

By change stream where the server has them (a replica set, a single-node one will do, or
mongos); on a standalone ``mongod``, or where the server refuses change streams, by asking
the server every second when the next task falls due (``POLL_SECONDS``).

The stream is opened *before* the store is asked when the next task falls due, so an enqueue
that lands between the two is never missed. Events that wake a waiter: an insert into the
queue (an enqueue), and any update that sets a task PENDING (reschedule, redrive) or moves
its next attempt (``retry_now``); the update does not carry the queue, so this can wake a
waiter of another queue: wake-ups may be spurious. Tasks that become due by the passing of
time (a delay or a lease running out) are covered by never waiting past the next due time
the server reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from typing import TYPE_CHECKING, Any

import pymongo
from pymongo.errors import OperationFailure, PyMongoError

from rdq.spi import Status
from rdq_mongo._filters import NOW_US

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

    from rdq_mongo._connection import Connection

__all__ = ["POLL_SECONDS", "seconds_until_due", "wait_due", "wait_for_due"]

log = logging.getLogger("rdq_mongo")

_MAX_AWAIT_MS = 1000
POLL_SECONDS = 1.0
"""Without change streams: how often ``wait_due`` asks for the next due time."""
# The server cannot or may not open change streams: not a replica set (40573), the stage is
# unknown (40324), unauthorized (13).
_NO_CHANGE_STREAMS = frozenset({13, 40324, 40573})


async def wait_due(
    connection: Connection, queue: str, timeout: float, operation_timeout: float
) -> bool:
    """Block until a task of ``queue`` may be due (True) or ``timeout`` seconds pass (False).

    With change streams, an enqueue, reschedule or redrive wakes the waiter at once; without
    them it asks every ``POLL_SECONDS`` when the next task falls due and wakes when one is
    (a new task is seen within that interval). Each call to the server is bounded by
    ``operation_timeout``; driver errors propagate (the caller translates)."""
    if connection.change_streams:
        try:
            return await wait_for_due(connection.tasks, queue, timeout, operation_timeout)
        except OperationFailure as exc:
            if exc.code not in _NO_CHANGE_STREAMS:
                raise
            log.warning("rdq_mongo: change streams refused (%s); polling instead", exc.code)
            connection.change_streams = False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        with pymongo.timeout(operation_timeout):
            wait = await seconds_until_due(connection.tasks, queue)
        if wait is not None and wait <= 0:
            return True
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        await asyncio.sleep(min(remaining, POLL_SECONDS, math.inf if wait is None else wait))


async def seconds_until_due(tasks: AsyncCollection[dict[str, Any]], queue: str) -> float | None:
    """Seconds (server clock) until the next task of ``queue`` is due, 0 or less if one is
    due now, ``None`` if none is scheduled."""
    pipeline: list[dict[str, Any]] = [
        {
            "$match": {
                "queue": queue,
                "status": {"$in": [Status.PENDING.value, Status.IN_FLIGHT.value]},
                "due": {"$type": "number"},
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


async def wait_for_due(
    tasks: AsyncCollection[dict[str, Any]], queue: str, timeout: float, operation_timeout: float
) -> bool:
    """Block until a task of ``queue`` may be due (True) or ``timeout`` seconds pass (False),
    woken by the change stream; each call to the server is bounded by ``operation_timeout``."""
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
                    # retry_now: a PENDING task made due now
                    {
                        "operationType": "update",
                        "updateDescription.updatedFields.next_attempt_at": {"$exists": True},
                    },
                ]
            }
        }
    ]
    # Each getMore waits at most this long on the server, well inside the operation timeout.
    await_ms = min(_MAX_AWAIT_MS, math.ceil(timeout * 1000), int(operation_timeout * 500))
    with pymongo.timeout(operation_timeout):
        stream = await tasks.watch(pipeline, max_await_time_ms=max(1, await_ms))
    try:
        with pymongo.timeout(operation_timeout):
            wait = await seconds_until_due(tasks, queue)
        if wait is not None and wait <= 0:
            return True
        limit = timeout if wait is None else min(timeout, wait)
        end = loop.time() + limit
        while loop.time() < end:
            with pymongo.timeout(operation_timeout):
                if await stream.try_next() is not None:
                    return True
    finally:
        with pymongo.timeout(operation_timeout), contextlib.suppress(PyMongoError):
            await stream.close()
    return wait is not None and wait <= timeout
