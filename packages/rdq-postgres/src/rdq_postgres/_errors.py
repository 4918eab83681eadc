"""Driver exceptions mapped to rdq's error tree at the store's boundary."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import asyncpg
import asyncpg.exceptions

from rdq.errors import RdqError, StorageError, StorageUnavailable

__all__ = ["is_unavailable", "translate_errors"]

# SQLSTATE classes and codes that mean "the server is not there (now)": retry later.
_UNAVAILABLE_STATES = ("08", "57P01", "57P02", "57P03", "53300", "25006", "28", "3D000")

# Undefined table, function or column: the schema is missing or older than this code.
_SCHEMA_BEHIND_STATES = ("42P01", "42883", "42703")
_SCHEMA_HINT = "; is the schema migrated? run `rdq migrate --storage URL` (or storage.migrate())"


def is_unavailable(exc: BaseException) -> bool:
    """True if ``exc`` means the server cannot be reached, is restarting, refused us or is a
    read-only standby; such failures are retryable."""
    if isinstance(exc, OSError | TimeoutError | ConnectionError):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        state = exc.sqlstate or ""
        return state.startswith(_UNAVAILABLE_STATES)
    if isinstance(exc, asyncpg.exceptions.InternalClientError):
        # The protocol state of a connection cut mid-operation ("cannot switch to state").
        return True
    if isinstance(exc, asyncpg.InterfaceError):
        text = str(exc).lower()
        return "closed" in text or ("connection" in text and "lost" in text)
    return False


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if isinstance(exc, asyncpg.PostgresError) and exc.sqlstate in _SCHEMA_BEHIND_STATES:
        reason += _SCHEMA_HINT
    return reason


@contextlib.contextmanager
def translate_errors(endpoint: str, on_lost: Callable[[], None] | None = None) -> Iterator[None]:
    """Run a block, turning driver exceptions into ``StorageUnavailable`` (retryable: the
    server at ``endpoint`` is unreachable, restarting, or refused us) or ``StorageError``.
    ``on_lost`` runs when connections were lost (to drop the pool's dead ones)."""
    try:
        yield
    except RdqError:
        raise
    except Exception as exc:
        if is_unavailable(exc):
            if on_lost is not None:
                on_lost()
            raise StorageUnavailable(
                f"PostgreSQL at {endpoint} is unavailable: {_reason(exc)}"
            ) from None
        if isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError):
            raise StorageError(f"PostgreSQL at {endpoint}: {_reason(exc)}") from None
        raise
