"""Running workers on simulated time (looptime): a store whose clock is the loop's, workers on
the loop's clock, and waits that cost no real time. For tests marked ``looptime``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import rdq
from rdq.spi import Envelope, Status, Storage
from rdq_memory import MemoryStorage

START = datetime(2030, 1, 1, tzinfo=UTC)
POLL = 0.05
"""The worker's shortest wait: a retry starts at most this long after it is due."""


def virtual_store(offset: timedelta = timedelta(0)) -> MemoryStorage:
    """A memory store whose clock is the running loop's (simulated) time, ``offset`` away."""
    loop = asyncio.get_running_loop()
    return MemoryStorage(clock=lambda: START + offset + timedelta(seconds=loop.time()))


@asynccontextmanager
async def worker(app: rdq.App, storage: Storage, **options: object) -> AsyncIterator[rdq.Worker]:
    """A worker on the loop's clock, running for the block; ``options`` override its
    defaults here (no maintenance, a grace period of one second, ``poll_min=POLL``)."""
    options = {"maintenance": False, "grace_period": 1.0, "poll_min": POLL, **options}
    w = rdq.Worker(
        app,
        storage,
        clock=asyncio.get_running_loop().time,
        **options,  # type: ignore[arg-type]
    )
    task = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.stop()
        await task


async def settle(storage: Storage, task_id: str, status: Status) -> Envelope:
    """The task once it has ``status`` (polled on the simulated clock: costs no real time)."""
    for _ in range(100_000):
        task = await storage.get(task_id)
        if task.status == status:
            return task
        await asyncio.sleep(0.5)
    raise AssertionError(f"{task_id} never reached {status}")


def gaps(task: Envelope) -> list[float]:
    """Seconds from each attempt's end to the next one's start, by the store's clock."""
    out = []
    for earlier, later in zip(task.attempts, task.attempts[1:], strict=False):
        assert earlier.finished_at is not None and later.started_at is not None
        out.append((later.started_at - earlier.finished_at).total_seconds())
    return out


async def until(check: Callable[[], Awaitable[bool]], step: float = 0.2) -> float:
    """Poll ``check`` on the simulated clock until it holds; the loop time then."""
    loop = asyncio.get_running_loop()
    for _ in range(1_000_000):
        if await check():
            return loop.time()
        await asyncio.sleep(step)
    raise AssertionError("never held")
