"""Driver exceptions mapped to rdq's error tree at the store's boundary."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import asyncpg
import asyncpg.exceptions
import msgspec

from rdq.errors import IDConflict, RdqError, StorageError, StorageUnavailable

__all__ = [
    "CONTROLLED",
    "ID_CONFLICT",
    "QueueControlled",
    "id_conflict",
    "is_unavailable",
    "translate_errors",
    "translated",
]

ID_CONFLICT = "RQ409"
"""The SQLSTATE of ``id_conflict()`` (migration 0002): a batch's id is in another queue."""
CONTROLLED = "RQ423"
"""The SQLSTATE of ``unrestricted()`` (migration 0005): claim.sql refuses a queue that a
control restricts; claim_controlled.sql claims it."""


class QueueControlled(StorageError):
    """claim.sql refused the queue: a control restricts its claims (the store then claims
    with claim_controlled.sql; never raised to callers)."""


# SQLSTATE classes and codes that mean "the server is not there (now)": retry later. 57014
# is a statement cancelled by the server's statement_timeout (the operation timeout).
_UNAVAILABLE_STATES = (
    "08",
    "57P01",
    "57P02",
    "57P03",
    "57014",
    "53300",
    "25006",
    "28",
    "3D000",
)

# Undefined table, function or column: the schema is missing or older than this code.
_SCHEMA_BEHIND_STATES = ("42P01", "42883", "42703")
_SCHEMA_HINT = "; is the schema migrated? run `rdq migrate --storage URL` (or storage.migrate())"
# PgBouncer refuses startup parameters it does not track, statement_timeout among them.
_POOLER_HINT = "; behind PgBouncer, add server_timeout=false to the storage URL"


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


def _timed_out(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) or (
        isinstance(exc, asyncpg.PostgresError) and exc.sqlstate == "57014"
    )


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if isinstance(exc, asyncpg.PostgresError) and exc.sqlstate in _SCHEMA_BEHIND_STATES:
        reason += _SCHEMA_HINT
    if "unsupported startup parameter" in text and "statement_timeout" in text:
        reason += _POOLER_HINT
    return reason


def id_conflict(detail: str | None, endpoint: str, message: str) -> RdqError:
    """The ``IDConflict`` that an RQ409 error names in its ``detail`` (a ``StorageError`` if
    the detail is malformed)."""
    try:
        found = msgspec.json.decode(detail or "", type=dict[str, str])
        return IDConflict(found["id"], found["queue"])
    except (msgspec.DecodeError, KeyError):
        return StorageError(f"PostgreSQL at {endpoint}: {message}")


@contextlib.contextmanager
def translate_errors(endpoint: str, on_lost: Callable[[], None] | None = None) -> Iterator[None]:
    """Run a block, turning driver exceptions into ``StorageUnavailable`` (retryable: the
    server at ``endpoint`` is unreachable, restarting, or refused us), ``IDConflict`` (the
    RQ409 error of a batch admission: nothing was stored) or ``StorageError``. ``on_lost``
    runs when connections were lost (to drop the pool's dead ones)."""
    try:
        yield
    except RdqError:
        raise
    except Exception as exc:
        rdq_error = translated(exc, endpoint, on_lost)
        if rdq_error is exc:
            raise
        raise rdq_error from None


def translated(exc: Exception, endpoint: str, on_lost: Callable[[], None] | None) -> Exception:
    """The rdq error for a driver exception (``exc`` itself if it is rdq's own or not the
    driver's): :func:`translate_errors` without the block, for a hot path."""
    if isinstance(exc, RdqError):
        return exc
    if is_unavailable(exc):
        # a timeout loses only the connection it ran on (the pool drops that one)
        if on_lost is not None and not _timed_out(exc):
            on_lost()
        return StorageUnavailable(f"PostgreSQL at {endpoint} is unavailable: {_reason(exc)}")
    if isinstance(exc, asyncpg.PostgresError) and exc.sqlstate == CONTROLLED:
        return QueueControlled(f"PostgreSQL at {endpoint}: {_reason(exc)}")
    if isinstance(exc, asyncpg.PostgresError) and exc.sqlstate == ID_CONFLICT:
        detail = getattr(exc, "detail", None)
        return id_conflict(detail, endpoint, f"{type(exc).__name__}: {exc}")
    if isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError):
        return StorageError(f"PostgreSQL at {endpoint}: {_reason(exc)}")
    return exc
