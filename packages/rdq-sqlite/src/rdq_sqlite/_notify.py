"""``wait_due`` support: a doorbell per database file, shared by the stores of one process.

A store that makes tasks due (enqueue, reschedule, redrive, import, retry_now, a change of a
control) rings the doorbell of its database for those queues after its transaction commits;
every ``wait_due`` waiting on one of them, in any store and on any event loop of this process,
wakes at once. Other processes cannot ring it: ``wait_due`` also looks every
``watch_interval`` seconds whether anyone committed to the file (``PRAGMA data_version``,
which reads no table) and then checks when the queue's next task is due. :func:`next_due`
and :func:`data_version` are those two looks, run on the read link's connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterable

from rdq_sqlite import _claims
from rdq_sqlite._clock import now_for_read
from rdq_sqlite._queries import SQL

__all__ = ["Doorbell", "data_version", "doorbell", "next_due", "wait_until_due"]

_bells: dict[str, Doorbell] = {}
_bells_lock = threading.Lock()


class Doorbell:
    """Waiters per queue; thread-safe, each waiter woken on its own event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[asyncio.Future[bool]]] = {}

    def listen(self, queue: str) -> asyncio.Future[bool]:
        """A future of the running loop that becomes True when ``queue`` is rung."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._waiters.setdefault(queue, set()).add(future)
        return future

    def forget(self, queue: str, future: asyncio.Future[bool]) -> None:
        with self._lock:
            waiters = self._waiters.get(queue)
            if waiters is not None:
                waiters.discard(future)
                if not waiters:
                    del self._waiters[queue]

    def ring(self, queues: Iterable[str]) -> None:
        """Wake every waiter of ``queues`` (from any thread)."""
        woken: list[asyncio.Future[bool]] = []
        with self._lock:
            for queue in set(queues):
                woken.extend(self._waiters.pop(queue, ()))
        for future in woken:
            with contextlib.suppress(RuntimeError):  # its event loop has closed
                future.get_loop().call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(True)


def doorbell(path: str | None) -> Doorbell:
    """The doorbell of the database file ``path`` (a private one for ``None``, in memory)."""
    if path is None:
        return Doorbell()
    path = os.path.realpath(path)
    with _bells_lock:
        bell = _bells.get(path)
        if bell is None:
            bell = _bells[path] = Doorbell()
        return bell


async def wait_until_due(
    next_due: Callable[[], Awaitable[tuple[int, int | None, int]]],
    data_version: Callable[[], Awaitable[int]],
    rung: asyncio.Future[bool],
    timeout: float,
    watch_interval: float | None,
) -> bool:
    """Wait until the queue may have a due task (True) or ``timeout`` seconds pass (False).

    ``next_due()`` gives ``(now, earliest due time or None, data_version)`` in microseconds;
    ``rung`` is the queue's doorbell future; ``watch_interval`` is how often to look for
    other processes' commits (``None``: no other process can write)."""
    deadline = time.monotonic() + timeout
    version: int | None = None
    due_in: float | None = None
    looked = time.monotonic()
    while True:
        if version is None or await data_version() != version:
            now, due, version = await next_due()
            if due is not None and due <= now:
                return True
            due_in = None if due is None else (due - now) / 1e6
            looked = time.monotonic()
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        wait = left if watch_interval is None else min(left, watch_interval)
        until_due = None if due_in is None else due_in - (time.monotonic() - looked)
        if until_due is not None and until_due <= wait:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(rung), max(until_due, 0.0))
            return True
        try:
            await asyncio.wait_for(asyncio.shield(rung), wait)
        except TimeoutError:
            continue
        return True


def data_version(conn: sqlite3.Connection) -> int:
    """A number that changes whenever another connection commits to the database."""
    version: int = conn.execute("PRAGMA data_version").fetchone()[0]
    return version


def next_due(conn: sqlite3.Connection, queue: str) -> tuple[int, int | None, int]:
    """``(now, earliest time a task of queue may be claimed or None, data_version)``, all in
    microseconds. A queue with controls counts from when they may let its tasks through
    (:func:`rdq_sqlite._claims.claimable_at`), so a paused queue is not due."""
    due = conn.execute(SQL.next_due, {"queue": queue}).fetchone()[0]
    now = now_for_read(conn)
    return now, _claims.claimable_at(conn, queue, now, due), data_version(conn)
