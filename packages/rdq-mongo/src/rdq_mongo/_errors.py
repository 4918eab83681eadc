"""Maps PyMongo's exceptions to rdq's error tree at the plugin boundary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pymongo import errors as mongo_errors

from rdq.errors import RdqError, StorageError, StorageUnavailable

__all__ = ["driver_errors"]

# Server answers that mean "this node cannot serve right now, try again": shutting down,
# stepping down, not primary, or interrupted (mongod's error codes).
_UNAVAILABLE_CODES = frozenset({6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436})
_AUTH_CODES = frozenset({13, 18})


@contextmanager
def driver_errors(where: str) -> Iterator[None]:
    """Re-raise any PyMongo exception as ``StorageUnavailable`` (the server at ``where`` cannot
    be reached, refuses the credentials, or is restarting: retryable) or ``StorageError``.
    rdq's own errors pass through unchanged."""
    try:
        yield
    except RdqError:
        raise
    except mongo_errors.ServerSelectionTimeoutError as exc:
        raise StorageUnavailable(f"MongoDB at {where} is unreachable: {_first_line(exc)}") from exc
    except (mongo_errors.ConnectionFailure, mongo_errors.NetworkTimeout) as exc:
        # AutoReconnect (network errors, NotPrimary) and friends.
        raise StorageUnavailable(f"lost the connection to MongoDB at {where}: {exc}") from exc
    except mongo_errors.OperationFailure as exc:
        if exc.code in _AUTH_CODES:
            raise StorageUnavailable(
                f"MongoDB at {where} refused the credentials: {_first_line(exc)}"
            ) from exc
        if exc.code in _UNAVAILABLE_CODES or exc.has_error_label("RetryableWriteError"):
            raise StorageUnavailable(f"MongoDB at {where} is not available: {exc}") from exc
        raise StorageError(f"MongoDB at {where} failed: {_first_line(exc)}") from exc
    except mongo_errors.ConfigurationError as exc:
        if "DNS" in str(exc):  # mongodb+srv:// names resolved when connecting
            raise StorageUnavailable(f"cannot resolve MongoDB at {where}: {exc}") from exc
        raise StorageError(f"MongoDB at {where}: {exc}") from exc
    except mongo_errors.PyMongoError as exc:
        raise StorageError(f"MongoDB at {where} failed: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    for marker in (", full error:", ", Timeout:", " (configured timeouts:"):
        text = text.split(marker, 1)[0]
    return text
