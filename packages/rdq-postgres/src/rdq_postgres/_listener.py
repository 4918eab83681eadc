"""LISTEN/NOTIFY wake-ups for ``wait_due`` over one dedicated connection."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

__all__ = ["DueListener"]

Connect = Callable[[], Awaitable[asyncpg.Connection]]


class DueListener:
    """Listens on the store's channel (payload: a queue name) and wakes that queue's waiters.

    The connection is opened on first use and reopened after it is lost; losing it wakes every
    waiter (a spurious wake-up, which the contract allows)."""

    def __init__(self, connect: Connect, channel: str) -> None:
        self._connect = connect
        self._channel = channel
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._waiters: dict[str, set[asyncio.Future[bool]]] = {}

    async def ensure(self) -> None:
        """Open the listening connection if it is not open (driver errors propagate)."""
        if self._conn is not None and not self._conn.is_closed():
            return
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return
            conn = await self._connect()
            try:
                await conn.add_listener(self._channel, self._on_notify)
            except BaseException:
                await conn.close()
                raise
            conn.add_termination_listener(self._on_terminate)
            self._conn = conn

    def register(self, queue: str) -> asyncio.Future[bool]:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(queue, set()).add(future)
        return future

    def unregister(self, queue: str, future: asyncio.Future[bool]) -> None:
        waiters = self._waiters.get(queue)
        if waiters is not None:
            waiters.discard(future)
            if not waiters:
                del self._waiters[queue]

    def _wake(self, futures: set[asyncio.Future[bool]]) -> None:
        for future in futures:
            if not future.done():
                future.set_result(True)

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: object) -> None:
        self._wake(set(self._waiters.get(str(payload), ())))

    def _on_terminate(self, conn: Any) -> None:
        self._conn = None
        for futures in list(self._waiters.values()):
            self._wake(set(futures))

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        for futures in list(self._waiters.values()):
            self._wake(set(futures))
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5)
            if not conn.is_closed():
                conn.terminate()
