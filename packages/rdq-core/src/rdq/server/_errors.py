"""One error shape for every API failure: ``{"error": {"code", "message", "field"}}``.

=========================  ======  ====================================================
code                       status  when
=========================  ======  ====================================================
``malformed_json``         400     the body is not JSON (truncated, not UTF-8, nested too
                                   deeply for the decoder)
``stale_cursor``           400     a cursor is malformed or from another queue/filter
``unauthorized``           401     no valid bearer token (``WWW-Authenticate: Bearer``)
``forbidden``              403     the token lacks the right the endpoint needs
``not_found``              404     no such task, or no such route
``unknown_name``           404     a queue, handler or dependency nothing on the store
                                   knows (a typo?): the message names the closest known
                                   one; ``"force": true`` acts on it anyway (a
                                   read of such a queue answers this too, not an
                                   empty page)
``method_not_allowed``     405     (``Allow`` names the methods the path takes)
``id_conflict``            409     the task id exists in another queue
``payload_too_large``      413     the body exceeds the node's ``max_body_bytes``
``unsupported_media_type`` 415     a POST body not sent as ``application/json``
``validation_error``       422     a field is missing, of the wrong type or out of range
``storage_unavailable``    503     the storage cannot be reached or did not answer in
                                   time (retry later)
``not_implemented``        501     the store does not offer the operation
``internal_error``         500     anything else (details are logged, not returned)
=========================  ======  ====================================================
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException, SerializationException, ValidationException

from rdq.errors import (
    IDConflict,
    NotFound,
    RdqError,
    StaleCursor,
    StorageUnavailable,
    UnknownName,
    Unsupported,
    ValidationError,
)
from rdq.logging import get_logger

__all__ = [
    "ApiError",
    "ErrorBody",
    "ErrorDetail",
    "body_field",
    "error_response",
    "exception_handlers",
]

_log = get_logger("rdq.server")
_MISSING = re.compile(r"missing required field `([^`]+)`")
_AT_PATH = re.compile(r" - at `\$\.?([^`]*)`$")


class ErrorDetail(msgspec.Struct, kw_only=True):
    code: str
    message: str
    field: str | None = None


class ErrorBody(msgspec.Struct, kw_only=True):
    error: ErrorDetail


class ApiError(Exception):
    """An error the API answers with as it is."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        super().__init__(message)


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
}


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response[Any]:
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="rdq"'
    body = ErrorBody(error=ErrorDetail(code=code, message=message, field=field))
    return Response(
        content=body, status_code=status, headers=headers or None, media_type="application/json"
    )


def to_api_error(exc: Exception) -> ApiError:
    """The API error for any exception a handler raised."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, UnknownName):
        message = exc.message
        if exc.forceable:
            message += '; nothing was done (send "force": true to act on it anyway)'
        return ApiError(404, "unknown_name", message, exc.field)
    if isinstance(exc, ValidationError):
        return ApiError(422, "validation_error", exc.message, exc.field)
    if isinstance(exc, NotFound):
        return ApiError(404, "not_found", str(exc))
    if isinstance(exc, IDConflict):
        return ApiError(409, "id_conflict", str(exc), "id")
    if isinstance(exc, StaleCursor):
        return ApiError(400, "stale_cursor", str(exc), "cursor")
    if isinstance(exc, StorageUnavailable):
        _log.warning("storage unavailable", error=str(exc))
        return ApiError(503, "storage_unavailable", "the storage is unavailable; retry later")
    if isinstance(exc, Unsupported):  # names the store and the capability it lacks
        return ApiError(501, "not_implemented", str(exc))
    if isinstance(exc, NotImplementedError):
        return ApiError(501, "not_implemented", f"the storage does not offer this: {exc}")
    if isinstance(exc, RecursionError):
        return ApiError(400, "malformed_json", "the body nests too deeply", "body")
    if isinstance(exc, ValidationException):
        field, message = _litestar_field(exc)
        return ApiError(422, "validation_error", message, field)
    if isinstance(exc, HTTPException):
        status = exc.status_code
        if status >= 500:
            return ApiError(500, "internal_error", "internal error")
        if status == 400 and "body exceeded" in str(exc.detail).lower():
            status = 413
        code = _HTTP_CODES.get(status, "bad_request")
        if status == 400 and isinstance(exc.__cause__, SerializationException):
            return ApiError(400, "malformed_json", f"the body is not JSON: {exc.detail}", "body")
        return ApiError(status, code, str(exc.detail))
    if isinstance(exc, RdqError):
        _log.error("storage error", error=str(exc), error_type=type(exc).__name__)
        return ApiError(500, "internal_error", "internal error")
    _log.exception("unhandled error")
    return ApiError(500, "internal_error", "internal error")


def _litestar_field(exc: ValidationException) -> tuple[str | None, str]:
    extra = exc.extra
    if isinstance(extra, list) and extra and isinstance(extra[0], dict):
        first = extra[0]
        key = first.get("key")
        message = str(first.get("message") or exc.detail)
        if key == "data":
            return body_field(message), message
        return (str(key).replace("[...]", "") if key else None), message
    return None, str(exc.detail)


def body_field(message: str) -> str:
    """The field of the request body that a msgspec validation ``message`` is about
    (``retry.max_attempts``, ``ids[1]``), or ``body`` for the body as a whole."""
    field = "body"
    missing = _MISSING.search(message)
    at_path = _AT_PATH.search(message)
    if missing is not None:
        field = missing.group(1)
        if at_path is not None and at_path.group(1):
            field = f"{at_path.group(1)}.{field}"
    elif at_path is not None and at_path.group(1):
        field = at_path.group(1)
    return field.replace("[...]", "")


def handle(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    error = to_api_error(exc)
    headers = None
    if error.status == 405 and isinstance(exc, HTTPException) and exc.headers:
        allow = {k.lower(): v for k, v in exc.headers.items()}.get("allow")
        headers = {"Allow": _methods(allow)} if allow else None
    return error_response(error.status, error.code, error.message, error.field, headers)


def _methods(allow: str) -> str:
    """``GET, HEAD`` from Litestar's list, which also names ``OPTIONS`` (answered for every
    path) — sorted, so the header reads the same every time."""
    methods = {m.strip().upper() for m in allow.split(",") if m.strip()}
    return ", ".join(sorted(methods))


exception_handlers: dict[type[Exception] | int, Any] = {Exception: handle}
