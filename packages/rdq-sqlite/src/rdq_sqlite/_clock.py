"""The store's clock: the host's clock, read inside the transaction, never running backwards.

SQLite has no clock of its own, so the store reads the host's (microseconds since the epoch,
UTC) *after* it holds the write lock, and keeps in the database (table ``clock``) the latest
time it has handed out. The store's now is the later of the two, so every process on the
database shares one clock that never goes back: times recorded later are never earlier, DLQ
and task pages stay in order, and no lease ends sooner than it was granted.

When the host's clock steps back (a correction, a restored VM), the store's time stands still
until the host catches up: leases and delays last up to that step longer, nothing expires
early. A step back of more than :data:`MAX_HOLD` is taken as a deliberate reset: the store
follows the host clock from then on and logs a warning (times handed out before it then lie in
the future). A step *forward* cannot be told from time passing: leases expire early, as on any
database server whose clock jumps. See docs/sqlite.md, "The clock".
"""

from __future__ import annotations

import logging
import sqlite3
import time

from rdq_sqlite._queries import SQL

__all__ = ["MAX_HOLD", "advance", "host_now", "now_for_read", "tick"]

MAX_HOLD = 10 * 60 * 1_000_000
"""Microseconds the store's time stands still, at most, after the host clock steps back."""

log = logging.getLogger("rdq_sqlite")


def host_now() -> int:
    """The host clock in microseconds since the epoch."""
    return time.time_ns() // 1000


def _store_now(host: int, latest: int) -> int:
    if host >= latest:
        return host
    if latest - host > MAX_HOLD:
        log.warning(
            "the host clock is %.1f s behind the latest time this SQLite database handed out; "
            "taking it as a clock reset and following the host clock",
            (latest - host) / 1e6,
        )
        return host
    return latest


def tick(conn: sqlite3.Connection) -> int:
    """Inside a write transaction: the store's now, recorded as the latest time handed out."""
    return advance(conn, conn.execute(SQL.clock_read).fetchone()[0])


def advance(conn: sqlite3.Connection, latest: int) -> int:
    """``tick`` for a caller that read the ``clock`` row (``latest``) itself, in a statement
    of its own (the claim reads it with the queue's controls)."""
    now = _store_now(host_now(), latest)
    if now != latest:
        conn.execute(SQL.clock_write, (now,))
    return now


def now_for_read(conn: sqlite3.Connection) -> int:
    """The store's now for an operation that records no time (nothing is written)."""
    latest = conn.execute(SQL.clock_read).fetchone()[0]
    host = host_now()
    return host if host >= latest or latest - host > MAX_HOLD else latest
