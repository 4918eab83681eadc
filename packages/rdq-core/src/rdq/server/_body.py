"""Reading JSON request bodies: content type, malformed input, nesting, and time ranges.

Every API POST runs :func:`require_json` before its handler: a body that is not declared as
JSON is a 415, one that does not decode (truncated, not UTF-8, nested deeper than the decoder
goes) a 400 ``malformed_json``. The decoded body is cached on the request, so the handler's
own parsing reads it from there. How deeply a payload may nest is ``limits.check_depth``'s rule,
the same for every entry point.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from litestar import Request
from litestar.exceptions import SerializationException

from rdq.server._errors import ApiError
from rdq.spi import limits

__all__ = ["check_time", "require_json"]


async def require_json(request: Request[Any, Any, Any]) -> None:
    """A ``before_request`` hook: the body is declared and decodes as JSON."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise ApiError(
            415,
            "unsupported_media_type",
            "send the body as JSON with Content-Type: application/json",
            "body",
        )
    if not await request.body():
        raise ApiError(400, "malformed_json", "the body is empty", "body")
    try:
        await request.json()
    except SerializationException as exc:
        raise ApiError(400, "malformed_json", f"the body is not JSON: {exc}", "body") from None
    except RecursionError:
        raise ApiError(400, "malformed_json", "the body nests too deeply", "body") from None


def check_time(value: datetime | None, field: str) -> datetime | None:
    """A filter time: timezone-aware and representable in UTC (years 1–9999)."""
    if value is None:
        return None
    return limits.check_aware(value, field).astimezone(UTC)
