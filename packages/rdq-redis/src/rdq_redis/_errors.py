"""Maps redis-py's exceptions to rdq's error tree at the plugin's boundary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from redis import exceptions as rx

from rdq.errors import StorageError, StorageUnavailable

__all__ = ["translate_errors"]

_RETRYABLE_REPLIES = (rx.ReadOnlyError, rx.TryAgainError, rx.ClusterDownError)


@contextmanager
def translate_errors(address: str) -> Iterator[None]:
    """Turn driver errors raised inside the block into ``StorageUnavailable`` (the server
    cannot be reached, refuses the credentials, is loading, read-only after a failover, or out
    of memory: retrying later may succeed) or ``StorageError`` (anything else). Messages name
    ``address`` (host:port)."""
    try:
        yield
    except rx.AuthenticationError as exc:
        raise StorageUnavailable(
            f"Redis at {address} refused the credentials: {_reason(exc)}"
        ) from exc
    except rx.BusyLoadingError as exc:
        raise StorageUnavailable(
            f"Redis at {address} is loading its data set; retry shortly"
        ) from exc
    except (rx.ConnectionError, rx.TimeoutError, ConnectionError, OSError) as exc:
        raise StorageUnavailable(f"Redis at {address} is unreachable: {_reason(exc)}") from exc
    except rx.OutOfMemoryError as exc:
        raise StorageUnavailable(
            f"Redis at {address} is out of memory (maxmemory reached under the noeviction "
            "policy): the write was refused and nothing was changed"
        ) from exc
    except rx.NoPermissionError as exc:
        raise StorageError(f"Redis at {address} denied a command: {_reason(exc)}") from exc
    except _RETRYABLE_REPLIES as exc:
        raise StorageUnavailable(f"Redis at {address} cannot write now: {_reason(exc)}") from exc
    except rx.RedisError as exc:
        raise StorageError(f"Redis at {address} failed: {_reason(exc)}") from exc
    except rx.RedisClusterException as exc:
        raise StorageUnavailable(
            f"Redis Cluster at {address} cannot be used: {_reason(exc)}"
        ) from exc


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
