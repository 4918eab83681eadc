"""``translate_errors``: PyMongo's exceptions mapped to rdq's error tree at the boundary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pymongo import errors as mongo_errors

from rdq.errors import RdqError, StorageError, StorageUnavailable

__all__ = ["translate_errors"]

# Server answers that mean "this node cannot serve right now, try again": shutting down,
# stepping down, not primary, interrupted, or out of time (mongod's error codes).
_UNAVAILABLE_CODES = frozenset(
    {6, 7, 50, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436}
)
_AUTH_CODES = frozenset({13, 18})


@contextmanager
def translate_errors(where: str) -> Iterator[None]:
    """Re-raise any PyMongo exception raised inside the block as ``StorageUnavailable`` (the
    server at ``where`` cannot be reached, refuses the credentials, is restarting or did not
    answer within the operation timeout: retryable) or ``StorageError`` (anything else).
    rdq's own errors pass through unchanged."""
    try:
        yield
    except RdqError:
        raise
    except mongo_errors.PyMongoError as exc:
        raise _translated(exc, where) from exc


def _translated(exc: mongo_errors.PyMongoError, where: str) -> StorageError:
    if isinstance(exc, mongo_errors.ServerSelectionTimeoutError):
        return StorageUnavailable(f"MongoDB at {where} is unreachable: {_first_line(exc)}")
    if exc.timeout:
        # The operation timeout ran out: a frozen or partitioned server is an outage.
        return StorageUnavailable(f"MongoDB at {where} did not answer in time: {_first_line(exc)}")
    if isinstance(exc, mongo_errors.ConnectionFailure):
        # AutoReconnect (network errors, NotPrimary) and friends.
        return StorageUnavailable(f"lost the connection to MongoDB at {where}: {_first_line(exc)}")
    if isinstance(exc, mongo_errors.OperationFailure):
        if exc.code in _AUTH_CODES:
            return StorageUnavailable(
                f"MongoDB at {where} refused the credentials: {_first_line(exc)}"
            )
        if exc.code in _UNAVAILABLE_CODES or exc.has_error_label("RetryableWriteError"):
            return StorageUnavailable(f"MongoDB at {where} is not available: {_first_line(exc)}")
    if isinstance(exc, mongo_errors.ConfigurationError) and "DNS" in str(exc):
        # mongodb+srv:// names are resolved when connecting.
        return StorageUnavailable(f"cannot resolve MongoDB at {where}: {_first_line(exc)}")
    return StorageError(f"MongoDB at {where} failed: {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    for marker in (", full error:", ", Timeout:", " (configured timeouts:"):
        text = text.split(marker, 1)[0]
    return text
