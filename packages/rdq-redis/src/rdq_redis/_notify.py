"""``wait_due`` for the Redis store: wake-ups over pub/sub, and the next due time.

Scripts that make a task due (enqueue, reschedule, redrive, import) ``PUBLISH`` to the queue's
``wake`` channel. A waiter keeps one subscription per queue open between calls (so an idle
worker does not open a connection every time it waits); before each wait it drops signals
that arrived earlier, then reads the next due time: anything published before that read is in
the due sets already, anything after it arrives on the subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from rdq_redis._errors import translate_errors
from rdq_redis._keys import QueueKeys

__all__ = ["KEPT_LISTENERS", "Waiters"]

KEPT_LISTENERS = 32
"""Queues per store whose subscription stays open between waits (one connection each)."""


class Waiters:
    """The pub/sub listeners of one store, one per queue waited on."""

    def __init__(
        self,
        client: Any,
        next_due: Callable[[QueueKeys], Awaitable[tuple[int, int | None]]],
        address: str,
    ) -> None:
        self._client = client
        self._next_due = next_due
        self._address = address
        self._listeners: dict[str, Any] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def wait(self, keys: QueueKeys, timeout: float) -> bool:
        """Block until a task of the queue may be due (True) or ``timeout`` passes (False)."""
        lock = self._locks.setdefault(keys.queue, asyncio.Lock())
        crowded = keys.queue not in self._listeners and len(self._listeners) >= KEPT_LISTENERS
        if lock.locked() or crowded:
            # Another caller holds this queue's listener, or this store already keeps as many
            # as it may (each holds a pooled connection): wait on a subscription of our own.
            pubsub = self._client.pubsub()
            try:
                with translate_errors(self._address):
                    await pubsub.subscribe(keys.wake)
                    return await self._wait(pubsub, keys, timeout)
            finally:
                await _close(pubsub)
        async with lock:
            pubsub = self._listeners.pop(keys.queue, None)
            try:
                with translate_errors(self._address):
                    if pubsub is None:
                        pubsub = self._client.pubsub()
                        await pubsub.subscribe(keys.wake)
                    else:
                        while await pubsub.get_message(ignore_subscribe_messages=True, timeout=0):
                            pass  # signals from before this wait: the due sets show them
                    woken = await self._wait(pubsub, keys, timeout)
            except BaseException:
                if pubsub is not None:
                    await _close(pubsub)  # a broken or interrupted listener is not reused
                raise
            self._listeners[keys.queue] = pubsub
            return woken

    async def _wait(self, pubsub: Any, keys: QueueKeys, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        now_us, next_due = await self._next_due(keys)
        wait = float(timeout)
        if next_due is not None:
            until_due = (next_due - now_us) / 1e6
            if until_due <= 0:
                return True
            wait = min(wait, until_due)
        deadline = loop.time() + wait
        while (remaining := deadline - loop.time()) > 0:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=remaining)
            if message is not None:
                return True
        return wait < timeout  # woke at the next due time rather than at the timeout

    async def aclose(self) -> None:
        """Close every listener."""
        listeners, self._listeners = self._listeners, {}
        for pubsub in listeners.values():
            await _close(pubsub)


async def _close(pubsub: Any) -> None:
    # Closing a listener whose connection already broke may fail again; it is gone either way.
    with contextlib.suppress(Exception):
        await pubsub.aclose()
