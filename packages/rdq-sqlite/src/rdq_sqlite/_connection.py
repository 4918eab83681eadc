"""One sqlite3 connection per thread, and the deadline every operation runs under.

A :class:`Link` owns a sqlite3 connection and the single thread that uses it. An operation is
a plain function of the connection, run whole on that thread: a write runs inside ``BEGIN
IMMEDIATE`` … ``COMMIT`` without going back to the event loop, so the write lock is held only
while SQLite works. The store keeps two links on a database file (writes, and reads, which
WAL lets run beside a write) and one on an in-memory database.

Every call has a deadline (the store's operation timeout). Waiting for the write lock is
retried with short sleeps (:class:`rdq.spi.Doubling`, from 0.5 ms up to 10 ms) until the
deadline, never longer; a statement still running at the deadline is interrupted
(``sqlite3_interrupt``), and the call raises ``StorageUnavailable`` either way. SQLite's own
busy handler is off (``busy_timeout = 0``): it sleeps up to 100 ms at a time, long after the
lock is free. Every other sqlite3 exception becomes an rdq error at this boundary
(:func:`rdq_sqlite._errors.translate_errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from rdq.errors import StorageError, StorageUnavailable
from rdq.spi import Doubling
from rdq_sqlite._errors import is_busy, primary_code, translate_errors
from rdq_sqlite._url import SqliteConfig

__all__ = ["MIN_SQLITE", "Link", "Mode"]

T = TypeVar("T")
Operation = Callable[[sqlite3.Connection], T]

MIN_SQLITE = (3, 37, 0)
"""STRICT tables (3.37), RETURNING (3.35) and generated columns (3.31)."""

_FIRST_BACKOFF = 0.0005
_MAX_BACKOFF = 0.01
_CACHE_KIB = 16 * 1024
_WAL_LIMIT = 64 * 1024 * 1024


class Mode:
    """How an operation runs: alone (one statement), in a read snapshot, or in a write
    transaction that holds the database's write lock from its first statement."""

    PLAIN = "plain"
    READ = "read"
    WRITE = "write"


class _Call:
    """One operation in flight: its deadline, whether it is waiting for the write lock, and
    whether the deadline interrupted it."""

    __slots__ = ("deadline", "interrupted", "locked_out")

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.interrupted = False
        self.locked_out = False


class Link:
    """A sqlite3 connection used only by its own thread (see the module docstring)."""

    def __init__(self, config: SqliteConfig, role: str, *, read_only: bool = False) -> None:
        self._config = config
        self._role = role
        self._read_only = read_only
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._running: _Call | None = None

    @property
    def where(self) -> str:
        return self._config.where

    # --- lifecycle (event loop side) ---------------------------------------------------------

    async def open(self) -> None:
        """Open the connection on a new thread; ``StorageUnavailable`` if the file cannot be
        opened or switched to WAL within the operation timeout."""
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            wanted = ".".join(map(str, MIN_SQLITE))
            raise StorageError(
                f"rdq-sqlite needs SQLite {wanted} or newer; this Python's sqlite3 module "
                f"uses SQLite {sqlite3.sqlite_version}"
            )
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"rdq-sqlite-{self._role}")
        try:
            await self.call(lambda _: None, Mode.PLAIN, opening=True)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Close the connection on its thread and let the thread go. Never raises."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        loop = asyncio.get_running_loop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                loop.run_in_executor(executor, self._disconnect), self._config.timeout
            )
        executor.shutdown(wait=False)

    # --- operations (event loop side) --------------------------------------------------------

    async def call(
        self,
        operation: Operation[T],
        mode: str,
        *,
        timeout: float | None = -1.0,
        opening: bool = False,
    ) -> T:
        """Run ``operation(connection)`` on the link's thread in ``mode`` and return its
        result. ``timeout`` defaults to the store's operation timeout (``None``: no limit)."""
        executor = self._executor
        if executor is None:
            raise StorageUnavailable(f"SQLite database {self.where}: the connection is closed")
        if timeout is not None and timeout < 0:
            timeout = self._config.timeout
        call = _Call(None if timeout is None else time.monotonic() + timeout)
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(executor, self._run, call, operation, mode, opening)
        if timeout is None:
            return await future
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            self._interrupt(call)
            if call.locked_out:
                raise StorageUnavailable(self._locked()) from None
            raise StorageUnavailable(self._late(timeout)) from None

    def _late(self, timeout: float | None) -> str:
        return (
            f"SQLite database {self.where} did not finish the operation within its "
            f"{timeout:g} s timeout (URL option timeout)"
        )

    def _locked(self) -> str:
        return (
            f"SQLite database {self.where} stayed locked by another connection for the whole "
            f"{self._config.timeout:g} s operation timeout (URL option timeout)"
        )

    def _interrupt(self, call: _Call) -> None:
        with self._lock:
            if self._running is call and self._conn is not None:
                call.interrupted = True
                self._conn.interrupt()

    # --- the link's thread -------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        config = self._config
        conn = sqlite3.connect(
            config.path or ":memory:",
            timeout=0,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=256,
        )
        try:
            conn.execute("PRAGMA busy_timeout = 0")
            if config.path is not None:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StorageError(
                        f"SQLite database {self.where} cannot use write-ahead logging "
                        f"(journal_mode stayed {mode!r}); put it on a local file system"
                    )
            conn.execute(f"PRAGMA synchronous = {config.synchronous}")
            conn.execute("PRAGMA fullfsync = ON")  # macOS: flush the drive's cache too
            conn.execute("PRAGMA checkpoint_fullfsync = ON")
            conn.execute(f"PRAGMA journal_size_limit = {_WAL_LIMIT}")
            conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
            conn.execute("PRAGMA temp_store = MEMORY")
            if self._read_only:
                conn.execute("PRAGMA query_only = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _run(self, call: _Call, operation: Operation[T], mode: str, opening: bool) -> T:
        with self._lock:
            if call.deadline is not None and time.monotonic() >= call.deadline:
                raise StorageUnavailable(self._late(self._config.timeout))
            self._running = call
        try:
            with translate_errors(self.where):
                try:
                    return self._attempt(call, operation, mode, opening)
                except sqlite3.Error as exc:
                    if call.interrupted or primary_code(exc) == sqlite3.SQLITE_INTERRUPT:
                        raise StorageUnavailable(self._late(self._config.timeout)) from None
                    raise
        finally:
            with self._lock:
                self._running = None

    def _attempt(self, call: _Call, operation: Operation[T], mode: str, opening: bool) -> T:
        backoff = Doubling(_FIRST_BACKOFF, _MAX_BACKOFF)
        while True:
            try:
                if self._conn is None:
                    if not opening:
                        raise StorageUnavailable(f"SQLite database {self.where} is not open")
                    self._conn = self._connect()
                call.locked_out = False
                return self._once(self._conn, operation, mode)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                call.locked_out = True
                pause = backoff.next()
                if call.deadline is not None and time.monotonic() + pause >= call.deadline:
                    raise StorageUnavailable(self._locked()) from None
                time.sleep(pause)

    @staticmethod
    def _once(conn: sqlite3.Connection, operation: Operation[T], mode: str) -> T:
        if mode == Mode.PLAIN:
            return operation(conn)
        conn.execute("BEGIN IMMEDIATE" if mode == Mode.WRITE else "BEGIN")
        try:
            result = operation(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise
        return result
