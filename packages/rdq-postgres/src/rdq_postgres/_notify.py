"""``wait_due`` support: LISTEN for wake-ups, and coalesced NOTIFY after the store's commits.

:class:`DueListener` listens on the store's channel over one dedicated connection and wakes
the waiters of the queue a NOTIFY names. :class:`Announcer` sends those NOTIFYs.

PostgreSQL serialises the commits of transactions that NOTIFY (a global lock held through the
commit's WAL flush), so a NOTIFY inside every enqueue would cap enqueues at one per disk flush.
Instead the store announces after its own commit, from a background task, one NOTIFY at a
time, rate-limited by a token bucket: up to ``burst`` NOTIFYs go out at once (so sporadic
submits never wait), then at most one every ``interval`` seconds, and queues announced
meanwhile are sent together in the next one (a NOTIFY is a committed transaction of its own,
so a busy producer should not send hundreds).
An enqueue may carry its own NOTIFY instead (:meth:`Announcer.carrying`): when nothing else is
being announced, the store's single enqueue notifies inside its own transaction, so the NOTIFY
reaches the listeners as the task commits rather than a second transaction and fsync later.
That takes a token of the same bucket and counts as the one notifying transaction in flight,
so the announcer's own NOTIFYs wait for it: the store never has two notifying commits at once.
A lost announcement costs latency only: ``wait_due`` also wakes on the earliest due time and
on its timeout."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

import asyncpg

__all__ = ["Announcer", "DueListener"]

log = logging.getLogger("rdq_postgres")

Connect = Callable[[], Awaitable[asyncpg.Connection]]
Send = Callable[[list[str]], Awaitable[None]]


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

    async def wait(
        self,
        queue: str,
        timeout: float,
        next_due: Callable[[], Awaitable[tuple[datetime, datetime | None]]],
    ) -> bool:
        """``wait_due``: True when a NOTIFY names ``queue``, when the queue's next due time
        (``next_due()`` gives the database's now and it, read after the waiter is registered,
        so no NOTIFY is missed in between) passes, or when the connection is lost; False when
        ``timeout`` seconds pass first."""
        future = self.register(queue)
        try:
            now, due = await next_due()
            if due is not None and due <= now:
                return True
            wait, timed = timeout, False
            if due is not None and (due - now).total_seconds() < wait:
                wait, timed = (due - now).total_seconds(), True
            try:
                return await asyncio.wait_for(future, wait)
            except TimeoutError:
                return timed
        finally:
            self.unregister(queue, future)

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


class Announcer:
    """Sends ``send(queues)`` for announced queues: one call in flight at a time; a burst of
    ``burst`` calls at once, then one every ``interval`` seconds while the burst refills
    (``interval`` 0: no limit beyond one call in flight). An enqueue that carries its own
    NOTIFY (:meth:`carrying`) is such a call too."""

    def __init__(self, send: Send, interval: float = 0.005, burst: int = 8) -> None:
        self._send = send
        self._interval = interval
        self._burst = float(burst)
        self._tokens = float(burst)
        self._refilled_at: float | None = None
        self._pending: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._carried = asyncio.Event()
        """Set while no enqueue carrying its own NOTIFY is in flight."""
        self._carried.set()

    def announce(self, queues: Iterable[str]) -> None:
        """Schedule a NOTIFY for ``queues`` (returns at once)."""
        self._pending.update(queues)
        if self._pending and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._drain())

    @contextlib.contextmanager
    def carrying(self) -> Iterator[bool]:
        """Whether the enqueue about to run may NOTIFY inside its own transaction: True when
        nothing is pending or being sent, no other enqueue carries one and the bucket has a
        token (which this spends). While a True lasts, the announcer's own NOTIFYs wait."""
        idle = self._carried.is_set() and not self._pending
        idle = idle and (self._task is None or self._task.done())
        if not idle or not self._take_token(asyncio.get_running_loop().time()):
            yield False
            return
        self._carried.clear()
        try:
            yield True
        finally:
            self._carried.set()

    def _take_token(self, now: float) -> bool:
        """Refill the bucket for the time since its last refill; spend a token if it has one."""
        if self._interval <= 0:  # no limit: one call in flight at a time, that is all
            self._tokens = self._burst
        elif self._refilled_at is not None:
            earned = (now - self._refilled_at) / self._interval
            self._tokens = min(self._burst, self._tokens + earned)
        self._refilled_at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            await self._carried.wait()  # one notifying transaction at a time
            if not self._take_token(loop.time()):
                await asyncio.sleep((1 - self._tokens) * self._interval)
                continue
            queues = sorted(self._pending)
            self._pending.clear()
            try:
                await self._send(queues)
            except Exception as exc:  # a lost wake-up only delays a waiter
                log.debug("NOTIFY for %s failed: %s", queues, exc)

    async def aclose(self, timeout: float = 2.0) -> None:
        """Send what is pending (waiting at most ``timeout`` seconds), then stop."""
        task, self._task = self._task, None
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except asyncio.CancelledError:
            task.cancel()  # the caller is cancelled: stop sending, and let the caller go
            raise
        except Exception:  # timed out, or the sender failed: pending wake-ups are dropped
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # the caller was cancelled while it waited: not ours to swallow
            except Exception as exc:
                log.debug("the NOTIFY sender ended with %r", exc)
