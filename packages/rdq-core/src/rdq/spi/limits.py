"""The documented limits of the contract, and the checks every entry point applies.

Storage plugins call these at the top of each operation, so every backend rejects the same
inputs with the same :class:`~rdq.errors.ValidationError` naming the field.

=====================  =====================================================================
task id                1–200 characters of ``A–Z a–z 0–9 . _ - : @ + = ~``
queue name             1–100 characters of ``A–Z a–z 0–9 . _ - :``, starting with a letter or digit
handler_ref            1–1024 characters, no whitespace or control characters
headers                at most 64; names 1–128 characters, values at most 4096
payload                at most 1 MiB once encoded as JSON
limit                  1–1000 (``claim_due`` and DLQ pages)
lease                  more than 0 s, at most 24 h
selector ids           at most 10 000 per call
=====================  =====================================================================
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta

import msgspec

from rdq.errors import ValidationError
from rdq.spi._models import DLQFilter, Envelope, Page, Selector

__all__ = [
    "MAX_HANDLER_REF_LENGTH",
    "MAX_HEADERS",
    "MAX_HEADER_NAME_LENGTH",
    "MAX_HEADER_VALUE_LENGTH",
    "MAX_ID_LENGTH",
    "MAX_LEASE",
    "MAX_LIMIT",
    "MAX_PAYLOAD_BYTES",
    "MAX_QUEUE_LENGTH",
    "MAX_SELECTOR_IDS",
    "check_aware",
    "check_lease",
    "check_limit",
    "check_page",
    "check_queue",
    "check_selector",
    "check_task",
    "check_task_id",
    "check_token",
]

MAX_ID_LENGTH = 200
MAX_QUEUE_LENGTH = 100
MAX_HANDLER_REF_LENGTH = 1024
MAX_HEADERS = 64
MAX_HEADER_NAME_LENGTH = 128
MAX_HEADER_VALUE_LENGTH = 4096
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_LIMIT = 1000
MAX_LEASE = timedelta(hours=24)
MAX_SELECTOR_IDS = 10_000

_ID_RE = re.compile(r"[A-Za-z0-9._\-:@+=~]+")
_QUEUE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-:]*")
_HANDLER_RE = re.compile(r"[^\s\x00-\x1f\x7f]+")


def check_task_id(value: object, field: str = "id") -> str:
    """Return ``value`` if it is a valid task id, else raise ``ValidationError``."""
    if not isinstance(value, str):
        raise ValidationError("must be a string", field=field)
    if not value:
        raise ValidationError("must not be empty", field=field)
    if len(value) > MAX_ID_LENGTH:
        raise ValidationError(f"longer than {MAX_ID_LENGTH} characters", field=field)
    if not _ID_RE.fullmatch(value):
        raise ValidationError("may hold only A-Z a-z 0-9 and . _ - : @ + = ~", field=field)
    return value


def check_queue(value: object, field: str = "queue") -> str:
    """Return ``value`` if it is a valid queue name, else raise ``ValidationError``."""
    if not isinstance(value, str):
        raise ValidationError("must be a string", field=field)
    if not value:
        raise ValidationError("must not be empty", field=field)
    if len(value) > MAX_QUEUE_LENGTH:
        raise ValidationError(f"longer than {MAX_QUEUE_LENGTH} characters", field=field)
    if not _QUEUE_RE.fullmatch(value):
        raise ValidationError(
            "must start with a letter or digit and hold only A-Z a-z 0-9 and . _ - :",
            field=field,
        )
    return value


def check_limit(value: object, field: str = "limit") -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValidationError("must be an integer", field=field)
    if value < 1:
        raise ValidationError("must be at least 1", field=field)
    if value > MAX_LIMIT:
        raise ValidationError(f"must be at most {MAX_LIMIT}", field=field)
    return value


def check_lease(value: object, field: str = "lease") -> timedelta:
    if not isinstance(value, timedelta):
        raise ValidationError("must be a timedelta", field=field)
    if value <= timedelta(0):
        raise ValidationError("must be greater than zero", field=field)
    if value > MAX_LEASE:
        raise ValidationError("must be at most 24 hours", field=field)
    return value


def check_token(value: object, field: str = "token") -> str:
    if not isinstance(value, str) or not value:
        raise ValidationError("must be a non-empty string", field=field)
    return value


def check_aware(value: object, field: str) -> datetime:
    if not isinstance(value, datetime):
        raise ValidationError("must be a datetime", field=field)
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError("must be timezone-aware", field=field)
    return value


def check_task(task: object) -> Envelope:
    """Validate an envelope offered to ``enqueue``: ids, names, headers and payload size."""
    if not isinstance(task, Envelope):
        raise ValidationError("must be an rdq.spi.Envelope", field="task")
    check_task_id(task.id)
    check_queue(task.queue)
    ref = task.handler_ref
    if not isinstance(ref, str) or not ref:
        raise ValidationError("must be a non-empty string", field="handler_ref")
    if len(ref) > MAX_HANDLER_REF_LENGTH:
        raise ValidationError(
            f"longer than {MAX_HANDLER_REF_LENGTH} characters", field="handler_ref"
        )
    if not _HANDLER_RE.fullmatch(ref):
        raise ValidationError("must not contain whitespace or control characters", "handler_ref")
    if not isinstance(task.headers, dict):
        raise ValidationError("must be an object of strings", field="headers")
    if len(task.headers) > MAX_HEADERS:
        raise ValidationError(f"more than {MAX_HEADERS} headers", field="headers")
    for name, value in task.headers.items():
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_HEADER_NAME_LENGTH:
            raise ValidationError(
                f"header names must be 1-{MAX_HEADER_NAME_LENGTH} characters", field="headers"
            )
        if not isinstance(value, str) or len(value) > MAX_HEADER_VALUE_LENGTH:
            raise ValidationError(
                f"must be a string of at most {MAX_HEADER_VALUE_LENGTH} characters",
                field=f"headers.{name}",
            )
    if task.attempt_count < 0:
        raise ValidationError("must not be negative", field="attempt_count")
    if task.redrive_count < 0:
        raise ValidationError("must not be negative", field="redrive_count")
    if task.next_attempt_at is not None:
        check_aware(task.next_attempt_at, "next_attempt_at")
    try:
        size = len(msgspec.json.encode(task.payload))
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"is not JSON-serializable: {exc}", field="payload") from None
    if size > MAX_PAYLOAD_BYTES:
        raise ValidationError(
            f"is {size} bytes encoded; the limit is {MAX_PAYLOAD_BYTES}", field="payload"
        )
    return task


def check_filter(value: object, field: str = "filter") -> DLQFilter:
    if not isinstance(value, DLQFilter):
        raise ValidationError("must be an rdq.spi.DLQFilter", field=field)
    for name in ("dead_lettered_after", "dead_lettered_before"):
        at = getattr(value, name)
        if at is not None:
            check_aware(at, f"{field}.{name}")
    return value


def check_selector(value: object) -> Selector:
    """A selector must carry ids or a filter (its constructor enforces exactly one)."""
    if not isinstance(value, Selector):
        raise ValidationError("must be an rdq.spi.Selector", field="selector")
    if value.ids is not None and value.filter is not None:
        raise ValidationError("give either ids or filter, not both", field="selector")
    if value.ids is None and value.filter is None:
        raise ValidationError("give either ids or filter", field="selector")
    if value.ids is not None:
        if len(value.ids) > MAX_SELECTOR_IDS:
            raise ValidationError(f"more than {MAX_SELECTOR_IDS} ids", field="selector.ids")
        for i, task_id in enumerate(value.ids):
            check_task_id(task_id, field=f"selector.ids[{i}]")
    if value.filter is not None:
        check_filter(value.filter, "selector.filter")
    return value


def check_page(value: object) -> Page:
    if not isinstance(value, Page):
        raise ValidationError("must be an rdq.spi.Page", field="page")
    check_limit(value.limit, "page.limit")
    if value.cursor is not None and not isinstance(value.cursor, str):
        raise ValidationError("must be a string", field="page.cursor")
    return value


def check_ids(ids: Sequence[str], field: str = "ids") -> list[str]:
    return [check_task_id(task_id, field=f"{field}[{i}]") for i, task_id in enumerate(ids)]
