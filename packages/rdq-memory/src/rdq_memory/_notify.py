"""``wait_due`` for the memory store: a waiter per caller, woken by any admission or change
of the queue (``MemoryState.wake``, from any thread), or when the next due time comes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from rdq_memory._state import MemoryState, Waiter

__all__ = ["wait_due"]


async def wait_due(
    state: MemoryState, queue: str, timeout: float, now: Callable[[], datetime]
) -> bool:
    """True as soon as a task of ``queue`` may be due, False after ``timeout`` seconds
    without one (arguments already checked)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[bool] = loop.create_future()
    with state.lock:
        at = now()
        next_due = state.next_due(queue)
        if next_due is not None and next_due <= at:
            return True
        wait = timeout
        if next_due is not None:
            wait = min(wait, (next_due - at).total_seconds())
        waiter = Waiter(loop, future)
        state.waiters.setdefault(queue, []).append(waiter)
    try:
        return await asyncio.wait_for(future, wait)
    except TimeoutError:
        return next_due is not None and wait < timeout
    finally:
        with state.lock:
            waiters = state.waiters.get(queue)
            if waiters and waiter in waiters:
                waiters.remove(waiter)
