"""``translate_errors``: sqlite3 exceptions mapped to rdq's error tree at the store's boundary
(every operation crosses it in :meth:`rdq_sqlite._connection.Link.call`)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

from rdq.errors import RdqError, StorageError, StorageUnavailable

__all__ = ["is_busy", "primary_code", "translate_errors"]

# Result codes that mean "the database cannot be used now; retrying later may work".
_UNAVAILABLE = {
    sqlite3.SQLITE_BUSY,
    sqlite3.SQLITE_LOCKED,
    sqlite3.SQLITE_INTERRUPT,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_NOMEM,
    sqlite3.SQLITE_PROTOCOL,
    sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_PERM,
    sqlite3.SQLITE_AUTH,
}
_SCHEMA_HINT = "; is the database migrated? run `rdq migrate --storage URL` (or storage.migrate())"


def primary_code(exc: BaseException) -> int | None:
    """SQLite's primary result code of ``exc`` (``None`` if it carries none)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def is_busy(exc: BaseException) -> bool:
    """True if ``exc`` says another connection holds the lock this one needs."""
    return primary_code(exc) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    return f"{name}: {text.splitlines()[0]}" if text else name


def _translate(exc: sqlite3.Error, where: str) -> StorageError:
    """The rdq error for a sqlite3 exception on the database at ``where``."""
    code = primary_code(exc)
    if code in _UNAVAILABLE:
        return StorageUnavailable(f"SQLite database {where} is unavailable: {_reason(exc)}")
    reason = _reason(exc)
    if code in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
        return StorageError(f"SQLite database {where} is not a usable database: {reason}")
    if "no such table" in str(exc) or "no such column" in str(exc):
        reason += _SCHEMA_HINT
    return StorageError(f"SQLite database {where}: {reason}")


@contextlib.contextmanager
def translate_errors(where: str) -> Iterator[None]:
    """Run a block, turning sqlite3 exceptions into ``StorageUnavailable`` (retryable: locked,
    interrupted, unreadable, disk full) or ``StorageError`` (anything else)."""
    try:
        yield
    except RdqError:
        raise
    except sqlite3.Error as exc:
        raise _translate(exc, where) from None
