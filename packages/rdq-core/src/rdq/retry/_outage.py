"""Outage-class failures: the ones that say a task's dependency is down rather than that
the task is wrong. They feed the task's circuit breaker (see :class:`rdq.Breaker`) and, during
an outage of its key, use up none of the task's attempts.

==========================================  =================================================
outage-class                                not outage-class
==========================================  =================================================
``ConnectionError`` (refused, reset,        ``rdq.Permanent`` and whatever it wraps
aborted, broken pipe) and ``OSError`` with  types the queue lists as ``non_retryable``
those errnos, ``TimeoutError``, the         plain bugs: ``KeyError``, ``TypeError``,
handler's own timeout                       ``ValueError``, …
``rdq.RetryAfter``, ``rdq.Unavailable``     an HTTP status that is not 408, 429, 502, 503
a status-bearing error of a well-known      or 504 (500 included), from a handler's client
client (httpx ``raise_for_status()``,       or a callback (see :mod:`rdq.retry._status`)
requests, aiohttp, botocore, gRPC, …) with  a gRPC code other than those
408, 429, 502, 503 or 504 (gRPC:
``UNAVAILABLE``, ``DEADLINE_EXCEEDED``,
``RESOURCE_EXHAUSTED``; botocore throttling)
well-known client libraries' connect,
timeout and protocol errors (httpx, aiohttp,
requests, urllib3, redis, asyncpg, …) by name
an HTTP callback's timeout or unreachable
receiver
the types in the queue's ``outage_errors``
==========================================  =================================================

A type matches when it *or any base class* of it does, so ``class GatewayDown
(ConnectionError)`` is outage-class. Pure functions: no I/O.
"""

from __future__ import annotations

import errno

from rdq.retry._status import StatusClass, status_failure
from rdq.signals import Permanent, RetryAfter, Unavailable

__all__ = ["OUTAGE_TYPE_NAMES", "is_outage", "is_outage_type"]

_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.EHOSTDOWN,
        errno.ENETDOWN,
        errno.EPIPE,
    }
)

OUTAGE_TYPE_NAMES = frozenset(
    {
        # the standard library
        "ConnectionError",
        "TimeoutError",
        "socket.timeout",
        "socket.gaierror",
        "ssl.SSLEOFError",
        "http.client.RemoteDisconnected",
        "asyncio.exceptions.TimeoutError",
        "concurrent.futures._base.TimeoutError",
        # rdq's own
        "rdq.Unavailable",
        "rdq.RetryAfter",
        "rdq.callbacks.CallbackFailed",
        "rdq.callbacks.CallbackTimeout",
        "rdq.callbacks.CallbackUnreachable",
        "rdq.Timeout",
        # client libraries, by the names their exceptions carry
        "httpx.TransportError",
        "httpx.TimeoutException",
        "httpx.ConnectError",
        "httpx.RemoteProtocolError",
        "httpcore.ConnectError",
        "httpcore.TimeoutException",
        "aiohttp.client_exceptions.ClientConnectionError",
        "aiohttp.client_exceptions.ServerTimeoutError",
        "requests.exceptions.ConnectionError",
        "requests.exceptions.Timeout",
        "urllib3.exceptions.NewConnectionError",
        "urllib3.exceptions.ProtocolError",
        "urllib3.exceptions.TimeoutError",
        "redis.exceptions.ConnectionError",
        "redis.exceptions.TimeoutError",
        "asyncpg.exceptions._base.InterfaceError",
        "asyncpg.exceptions.CannotConnectNowError",
        "asyncpg.exceptions.TooManyConnectionsError",
        "psycopg.OperationalError",
        "pymongo.errors.AutoReconnect",
        "pymongo.errors.ServerSelectionTimeoutError",
        "grpc.RpcError",
        "botocore.exceptions.EndpointConnectionError",
        "botocore.exceptions.ConnectTimeoutError",
    }
)
"""Qualified type names (``module.qualname``; builtins by name) that are outage-class."""


def _name(exc_type: type[BaseException]) -> str:
    module = exc_type.__module__
    if module == "builtins":
        return exc_type.__qualname__
    if module == "rdq.signals":
        module = "rdq"
    return f"{module}.{exc_type.__qualname__}"


def is_outage_type(
    exc_type: type[BaseException], extra: tuple[type[BaseException], ...] = ()
) -> bool:
    """True if ``exc_type`` (or a base class of it) is outage-class, or a subclass of one of
    ``extra`` (the queue's ``outage_errors``)."""
    if issubclass(exc_type, Permanent):
        return False
    if extra and issubclass(exc_type, extra):
        return True
    return any(_name(klass) in OUTAGE_TYPE_NAMES for klass in exc_type.__mro__)


def is_outage(exc: BaseException, extra: tuple[type[BaseException], ...] = ()) -> bool:
    """True if ``exc`` says the task's dependency is down (see the table above): an error
    that carries a status is judged by its status, unless the queue lists its type."""
    if isinstance(exc, Permanent):
        return False
    if isinstance(exc, RetryAfter | Unavailable):
        return True
    if extra and isinstance(exc, extra):
        return True
    status = status_failure(exc)
    if status is not None:
        return status.kind is StatusClass.OUTAGE
    if isinstance(exc, OSError) and exc.errno in _ERRNOS:
        return True
    return is_outage_type(type(exc), extra)
