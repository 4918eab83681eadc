"""What an HTTP status (or a client library's status code) says about a failure: the one table
the handlers' errors, the HTTP callbacks and docs/engine.md share.

=====================  ==================  ==================================================
status                 class               why
=====================  ==================  ==================================================
408, 429, 502, 503,    ``outage``          the service (or the gateway before it) cannot
504                                        answer now: it feeds the breaker, and a task
                                           failing so during an outage is not charged
500, 425, other 5xx    ``retryable``       the service answered but failed this request:
                                           retried with backoff and charged, never trips
                                           the breaker
other 4xx (and 3xx)    ``rejected``        the request is wrong: a handler's error is an
                                           ordinary (charged) failure, a callback's is
                                           permanent
=====================  ==================  ==================================================

**Why 500 is not outage-class.** A 500 says the service is up and failed on *this* request,
usually a bug its input triggers: counting it as an outage would let one such task hold every
task of its dependency behind an open breaker, without spending an attempt, for as long as it
keeps failing. A service that answers 500 for everything while its own database is down is an
outage its gateway usually reports as 502 or 503; where it does not, list the error in the
queue's ``outage_errors`` or raise ``rdq.Unavailable``.

A ``Retry-After`` on a response (seconds, or an HTTP date) is honoured: the retry is not
before it.

The errors of well-known clients are read by duck typing, without importing the client:
httpx's ``HTTPStatusError``, requests' ``HTTPError``, aiohttp's ``ClientResponseError``,
urllib's ``HTTPError``, botocore's ``ClientError`` (its throttling error codes are 429s),
gRPC's ``RpcError`` (``UNAVAILABLE``, ``DEADLINE_EXCEEDED`` and ``RESOURCE_EXHAUSTED`` are
outage-class, every other code is not) and google-api-core's ``GoogleAPICallError``.
"""

from __future__ import annotations

import email.utils
import enum
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

__all__ = [
    "MAX_RETRY_AFTER",
    "OUTAGE_GRPC_CODES",
    "OUTAGE_STATUSES",
    "StatusClass",
    "StatusFailure",
    "parse_retry_after",
    "status_class",
    "status_failure",
]

MAX_RETRY_AFTER = 86_400.0
"""``Retry-After`` values are capped at one day."""


class StatusClass(enum.StrEnum):
    OUTAGE = "outage"
    RETRYABLE = "retryable"
    REJECTED = "rejected"


OUTAGE_STATUSES = frozenset({408, 429, 502, 503, 504})
"""The statuses that say the service cannot answer now (outage-class)."""
OUTAGE_GRPC_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"})
"""The gRPC status codes that are outage-class."""
BOTO_THROTTLING = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
    }
)
"""botocore's throttling error codes (its standard retry mode's list): each is a 429."""


def status_class(status: int) -> StatusClass:
    """The class of an HTTP ``status`` that is not a success (see the table above)."""
    if status in OUTAGE_STATUSES:
        return StatusClass.OUTAGE
    if status >= 500 or status == 425:
        return StatusClass.RETRYABLE
    return StatusClass.REJECTED


def parse_retry_after(value: object, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), capped
    at :data:`MAX_RETRY_AFTER`; None if absent or unreadable."""
    if not isinstance(value, str):
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


class StatusFailure(NamedTuple):
    """What a status-bearing error says: its class, the status (or gRPC code) it carried, and
    the ``Retry-After`` of its response (seconds; ``None``: none)."""

    kind: StatusClass
    status: int | str
    retry_after: float | None = None


def _header(headers: Any, name: str) -> object:
    try:
        return headers.get(name) if headers is not None else None
    except Exception:  # a headers object of an unexpected shape: no header
        return None


def _http(status: object, headers: Any) -> StatusFailure | None:
    if not isinstance(status, int) or isinstance(status, bool) or status < 300:
        return None
    return StatusFailure(
        status_class(status), status, parse_retry_after(_header(headers, "Retry-After"))
    )


def _httpx(exc: Any) -> StatusFailure | None:
    response = getattr(exc, "response", None)
    return _http(getattr(response, "status_code", None), getattr(response, "headers", None))


def _aiohttp(exc: Any) -> StatusFailure | None:
    return _http(getattr(exc, "status", None), getattr(exc, "headers", None))


def _urllib(exc: Any) -> StatusFailure | None:
    return _http(getattr(exc, "code", None), getattr(exc, "headers", None))


def _botocore(exc: Any) -> StatusFailure | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    error = response.get("Error") or {}
    code = error.get("Code") if isinstance(error, dict) else None
    meta = response.get("ResponseMetadata") or {}
    headers = meta.get("HTTPHeaders") if isinstance(meta, dict) else None
    if code in BOTO_THROTTLING:
        return StatusFailure(
            StatusClass.OUTAGE, 429, parse_retry_after(_header(headers, "retry-after"))
        )
    status = meta.get("HTTPStatusCode") if isinstance(meta, dict) else None
    return _http(status, headers)


def _callback(exc: Any) -> StatusFailure | None:
    status = getattr(exc, "status", None)
    found = _http(status, None)
    if found is None:
        return None
    return found._replace(retry_after=getattr(exc, "retry_after", None))


def _grpc(exc: Any) -> StatusFailure | None:
    code = getattr(exc, "code", None)
    try:
        return _grpc_code(code() if callable(code) else code)
    except Exception:  # an RpcError that is not a call: no code to read
        return None


def _grpc_code(code: object) -> StatusFailure | None:
    name = getattr(code, "name", None)
    if not isinstance(name, str):
        return None
    kind = StatusClass.OUTAGE if name in OUTAGE_GRPC_CODES else StatusClass.RETRYABLE
    return StatusFailure(kind, name)


def _google(exc: Any) -> StatusFailure | None:
    found = _http(getattr(exc, "code", None), None)
    return found if found is not None else _grpc_code(getattr(exc, "grpc_status_code", None))


_READERS: dict[str, Callable[[Any], StatusFailure | None]] = {
    "httpx.HTTPStatusError": _httpx,
    "requests.exceptions.HTTPError": _httpx,
    "aiohttp.client_exceptions.ClientResponseError": _aiohttp,
    "urllib.error.HTTPError": _urllib,
    "botocore.exceptions.ClientError": _botocore,
    "grpc.RpcError": _grpc,
    "google.api_core.exceptions.GoogleAPICallError": _google,
    "rdq.callbacks.CallbackFailed": _callback,
}
"""Status-bearing error types by qualified name (``module.qualname``), and how each is read."""


def _qualified(klass: type) -> str:
    return f"{klass.__module__}.{klass.__qualname__}"


def status_failure(exc: BaseException) -> StatusFailure | None:
    """What ``exc`` says through the status it carries, when it is (or derives from) one of
    the status-bearing errors above and carries one; ``None`` otherwise."""
    for klass in type(exc).__mro__:
        reader = _READERS.get(_qualified(klass))
        if reader is not None:
            try:
                return reader(exc)
            except Exception:  # a broken or unexpected error object: no status
                return None
    return None
