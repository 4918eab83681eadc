"""Envelope encoding: JSON bytes and plain builtins, keeping unknown fields.

A newer producer may add fields this release does not know. They are collected into
``Envelope.extra`` on decode and written back flat on encode, so a round trip through any
backend or node loses nothing. Malformed or wrong-typed input raises
:class:`~rdq.errors.ValidationError` naming the field (``attempts[0].number``), and so does
input nested deeper than the decoder goes (``RecursionError`` never escapes).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from rdq.errors import ValidationError
from rdq.spi._models import Envelope

__all__ = [
    "decode_envelope",
    "encode_envelope",
    "envelope_from_builtins",
    "envelope_to_builtins",
]

_KNOWN_FIELDS = frozenset(f for f in Envelope.__struct_fields__ if f != "extra")
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()
_AT_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_MISSING = re.compile(r"missing required field `(?P<name>[^`]+)`")
_TOO_DEEP = "nests arrays and objects deeper than the decoder goes"


def envelope_to_builtins(task: Envelope) -> dict[str, Any]:
    """The envelope as a JSON-ready dict (datetimes as RFC 3339 strings), extras merged in."""
    out: dict[str, Any] = msgspec.to_builtins(task)
    extra = out.pop("extra", None) or {}
    for key, value in extra.items():
        if key not in _KNOWN_FIELDS:
            out[key] = value
    return out


def encode_envelope(task: Envelope) -> bytes:
    """JSON bytes of the envelope, unknown fields included."""
    return _encoder.encode(envelope_to_builtins(task))


def envelope_from_builtins(obj: Any) -> Envelope:
    """Build an envelope from decoded JSON, keeping unknown top-level fields in ``extra``."""
    if not isinstance(obj, dict):
        raise ValidationError("an envelope must be a JSON object", field="envelope")
    known: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in obj.items():
        if not isinstance(key, str):
            raise ValidationError("field names must be strings", field="envelope")
        (known if key in _KNOWN_FIELDS else extra)[key] = value
    try:
        task = msgspec.convert(known, Envelope, strict=False)
    except msgspec.ValidationError as exc:
        raise _field_error(exc) from None
    except RecursionError:
        raise ValidationError(_TOO_DEEP, field="envelope") from None
    if extra:
        task.extra = extra
    return task


def decode_envelope(data: bytes | str) -> Envelope:
    """Decode JSON into an envelope; ``ValidationError`` names the first bad field."""
    try:
        obj = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ValidationError(f"malformed JSON: {exc}", field="envelope") from None
    except RecursionError:
        raise ValidationError(_TOO_DEEP, field="envelope") from None
    return envelope_from_builtins(obj)


def _field_error(exc: msgspec.ValidationError) -> ValidationError:
    text = str(exc)
    match = _AT_PATH.search(text)
    path = match.group("path").lstrip(".") if match else ""
    message = text[: match.start()] if match else text
    missing = _MISSING.search(message)
    if missing is not None:
        path = f"{path}.{missing.group('name')}" if path else missing.group("name")
    return ValidationError(message, field=path or "envelope")
