"""Reading JSON request bodies: content type, malformed input, nesting, and time ranges.

Every API POST runs :func:`json_body` before its handler: a body that is not declared as
JSON is a 415, one that does not decode (truncated, not UTF-8, nested deeper than the decoder
goes) a 400 ``malformed_json``, and one whose fields do not have the JSON types of the
request model a 422 naming the field. The decoded body is cached on the request, so the
handler's own parsing reads it from there. How deeply a payload may nest is
``bounds.check_depth``'s rule, the same for every entry point.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
from litestar import Request
from litestar.exceptions import SerializationException

from rdq.errors import ValidationError
from rdq.server._errors import ApiError, body_field
from rdq.spi import bounds

__all__ = ["check_time", "json_body", "require_json", "whole_numbers"]


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


def json_body(model: type[Any]) -> Callable[[Request[Any, Any, Any]], Awaitable[None]]:
    """A ``before_request`` hook: :func:`require_json`, then the body matches ``model`` with
    the JSON types its OpenAPI schema declares. The handler's own parsing converts leniently
    (a number sent as a string, ``"delay": "5"``, or a boolean as ``0``); here such a field
    is a 422, so a client never gets a meaning it did not write (``"dry_run": 0`` purging)."""

    async def hook(request: Request[Any, Any, Any]) -> None:
        await require_json(request)
        try:
            msgspec.convert(whole_numbers(await request.json(), model), model)
        except msgspec.ValidationError as exc:
            message = str(exc)
            field = body_field(message)
            message = message.split(" - at `$", 1)[0]
            raise ApiError(422, "validation_error", message, field) from None

    return hook


def whole_numbers(value: Any, model: Any) -> Any:
    """``value`` (decoded JSON) with each number written with a fraction of zero (``192.0``,
    ``1e2``) that ``model`` declares an integer turned into that integer: JSON Schema — and so
    the OpenAPI document and every client generated from it — calls ``192.0`` an integer, and
    the API takes what its document calls valid. Other fields, payloads included, are left as
    they were sent."""
    return _whole(value, msgspec.inspect.type_info(model))


def _whole(value: Any, info: Any) -> Any:
    inspect = msgspec.inspect
    if isinstance(info, inspect.Metadata):
        return _whole(value, info.type)
    if isinstance(info, inspect.UnionType):
        for option in info.types:
            value = _whole(value, option)
        return value
    if isinstance(info, inspect.IntType):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value
    if isinstance(info, inspect.ListType) and isinstance(value, list):
        return [_whole(item, info.item_type) for item in value]
    if isinstance(info, inspect.StructType) and isinstance(value, dict):
        fields = {f.encode_name: f.type for f in info.fields}
        return {k: _whole(v, fields[k]) if k in fields else v for k, v in value.items()}
    return value


def check_time(value: datetime | str | None, field: str) -> datetime | None:
    """A filter time: timezone-aware and representable in UTC (years 1–9999). Text (a query
    parameter) must be RFC 3339: a number is not read as seconds since the epoch."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = msgspec.convert(value, datetime)
        except msgspec.ValidationError as exc:
            raise ValidationError(str(exc), field=field) from None
    return bounds.check_aware(value, field).astimezone(UTC)
