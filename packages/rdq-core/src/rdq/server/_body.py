"""Reading JSON request bodies: content type, malformed input, nesting, and time ranges.

Every API POST runs :func:`require_json` before its handler: a body that is not declared as
JSON is a 415, one that does not decode (truncated, not UTF-8, nested deeper than the decoder
goes) a 400 ``malformed_json``. The decoded body is cached on the request, so the handler's
own parsing reads it from there.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from litestar import Request
from litestar.exceptions import SerializationException

from rdq.errors import ValidationError
from rdq.server._errors import ApiError
from rdq.spi import limits

__all__ = ["MAX_DEPTH", "check_depth", "check_time", "require_json"]

MAX_DEPTH = 64
"""How deeply a submitted payload (or unknown field) may nest arrays and objects."""


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


def check_depth(value: Any, field: str, limit: int = MAX_DEPTH) -> None:
    """Raise ``ValidationError`` naming ``field`` if ``value`` nests deeper than ``limit``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise ValidationError(f"nests deeper than {limit} levels", field=field)
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def check_time(value: datetime | None, field: str) -> datetime | None:
    """A filter time: timezone-aware and representable in UTC (years 1–9999)."""
    if value is None:
        return None
    limits.check_aware(value, field)
    try:
        in_utc = value.astimezone(UTC)
    except OverflowError:
        raise ValidationError("is out of range (years 1-9999 in UTC)", field=field) from None
    if not 1 <= in_utc.year <= 9999:
        raise ValidationError("is out of range (years 1-9999 in UTC)", field=field)
    return in_utc
