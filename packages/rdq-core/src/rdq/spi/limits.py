"""The documented limits of the contract, and the checks every entry point applies.

Storage plugins call these at the top of each operation, so every backend rejects the same
inputs with the same :class:`~rdq.errors.ValidationError` naming the field.

=====================  =====================================================================
task id                1–200 characters of ``A–Z a–z 0–9 . _ - : @ + = ~``
queue name             1–100 characters of ``A–Z a–z 0–9 . _ - :``, starting with a letter or digit
handler_ref            1–1024 characters, no whitespace or control characters
headers                at most 64; names 1–128 characters, values at most 4096
payload                at most 1 MiB once encoded as JSON, nesting arrays and objects at most
                       64 levels deep (``MAX_DEPTH``; unknown fields in ``extra`` too)
retry override         ``max_attempts`` an integer, ``backoff`` a string, ``base``/``cap``/
                       ``timeout`` finite numbers (each may be ``None``)
limit                  1–1000 (``claim_due``, pages, ``import_tasks``)
lease                  more than 0 s, at most 24 h
delay                  a ``timedelta`` from 0 s to 36 500 days (``MAX_DELAY``), or ``None``
times                  timezone-aware, within the years 1–9999 once converted to UTC
priority               an integer from -10 to 10 (default 0)
selector ids           at most 10 000 per call (redrive, purge, cancel)
worker id              1–200 characters, no control characters
attempt                ``number`` ≥ 1; ``error_type`` at most 1024 characters,
                       ``error_message`` at most 8 192, ``traceback`` at most 32 768 (the
                       records an enqueued or imported task carries, too)
audit entry            ``actor`` and ``action`` 1–200 characters, ``reason`` at most 2 000
=====================  =====================================================================

Every store also has an operation timeout (``DEFAULT_OPERATION_TIMEOUT`` seconds unless its URL
says otherwise) and may estimate counts above ``EXACT_COUNT_THRESHOLD``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from itertools import accumulate

import msgspec

from rdq.errors import ValidationError
from rdq.spi._models import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    STATUS_TIME_FIELDS,
    Attempt,
    AuditEntry,
    AuditFilter,
    Completion,
    DLQFilter,
    Envelope,
    Outcome,
    Page,
    RetryOverride,
    Selector,
    Status,
    TaskFilter,
)

__all__ = [
    "DEFAULT_OPERATION_TIMEOUT",
    "EXACT_COUNT_THRESHOLD",
    "MAX_AUDIT_REASON_LENGTH",
    "MAX_AUDIT_WORD_LENGTH",
    "MAX_DELAY",
    "MAX_DEPTH",
    "MAX_ERROR_MESSAGE_LENGTH",
    "MAX_ERROR_TYPE_LENGTH",
    "MAX_HANDLER_REF_LENGTH",
    "MAX_HEADERS",
    "MAX_HEADER_NAME_LENGTH",
    "MAX_HEADER_VALUE_LENGTH",
    "MAX_ID_LENGTH",
    "MAX_LEASE",
    "MAX_LIMIT",
    "MAX_PAYLOAD_BYTES",
    "MAX_PRIORITY",
    "MAX_QUEUE_LENGTH",
    "MAX_SELECTOR_IDS",
    "MAX_TRACEBACK_LENGTH",
    "MAX_WORKER_ID_LENGTH",
    "MIN_PRIORITY",
    "check_attempt",
    "check_audit_entry",
    "check_audit_filter",
    "check_aware",
    "check_completions",
    "check_delay",
    "check_depth",
    "check_filter",
    "check_ids",
    "check_imported_task",
    "check_imported_tasks",
    "check_lease",
    "check_limit",
    "check_page",
    "check_priority",
    "check_queue",
    "check_resolution",
    "check_retry",
    "check_selector",
    "check_task",
    "check_task_filter",
    "check_task_id",
    "check_tasks",
    "check_token",
    "check_wait",
    "check_worker_id",
]

MAX_ID_LENGTH = 200
MAX_QUEUE_LENGTH = 100
MAX_HANDLER_REF_LENGTH = 1024
MAX_HEADERS = 64
MAX_HEADER_NAME_LENGTH = 128
MAX_HEADER_VALUE_LENGTH = 4096
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_DEPTH = 64
"""How deeply a payload (or an unknown field's value) may nest arrays and objects."""
MAX_LIMIT = 1000
MAX_LEASE = timedelta(hours=24)
MAX_DELAY = timedelta(days=36_500)
"""About 100 years: a task's first due time stays far inside the years every store holds."""
MAX_SELECTOR_IDS = 10_000
MAX_WORKER_ID_LENGTH = 200
MAX_ERROR_TYPE_LENGTH = 1024
MAX_ERROR_MESSAGE_LENGTH = 8192
MAX_TRACEBACK_LENGTH = 32768
MAX_AUDIT_WORD_LENGTH = 200
MAX_AUDIT_REASON_LENGTH = 2000
DEFAULT_OPERATION_TIMEOUT = 10.0
"""Seconds a store waits on its backend for one operation before raising StorageUnavailable."""
EXACT_COUNT_THRESHOLD = 10_000
"""Counts at or below this are exact in ``stats``/``list_queues``; above it they may be
estimates (named in ``Stats.estimated``)."""

_ID_RE = re.compile(r"[A-Za-z0-9._\-:@+=~]+")
_QUEUE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-:]*")
_HANDLER_RE = re.compile(r"[^\s\x00-\x1f\x7f]+")
_JSON_STRING_RE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
# JSON text to one signed byte per bracket: +1 for "[" and "{", -1 for "]" and "}".
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_encode_json = msgspec.json.Encoder().encode


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
    """A timezone-aware datetime that lies within the years 1–9999 in UTC (the range every
    store and client library can hold; an offset can push a ``datetime`` past it)."""
    if not isinstance(value, datetime):
        raise ValidationError("must be a datetime", field=field)
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError("must be timezone-aware", field=field)
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise ValidationError("is out of range (years 1-9999 in UTC)", field=field) from None
    return value


def _json_depth(encoded: bytes) -> int:
    """How deeply the JSON text ``encoded`` nests arrays and objects (0 for a scalar)."""
    brackets = _JSON_STRING_RE.sub(b"", encoded).translate(None, _NOT_BRACKETS)
    steps = memoryview(brackets.translate(_BRACKET_STEPS)).cast("b")
    return max(accumulate(steps), default=0)


def _encoded(value: object, field: str, limit: int) -> bytes:
    """``value`` as JSON text, if it is JSON-serializable and nests at most ``limit`` levels."""
    try:
        encoded = _encode_json(value)
    except RecursionError:
        raise ValidationError(f"nests deeper than {limit} levels", field=field) from None
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"is not JSON-serializable: {exc}", field=field) from None
    # a value holding fewer brackets than the limit cannot nest deeper (the common case)
    if encoded.count(b"[") + encoded.count(b"{") > limit and _json_depth(encoded) > limit:
        raise ValidationError(f"nests deeper than {limit} levels", field=field)
    return encoded


def check_depth(value: object, field: str, limit: int = MAX_DEPTH) -> None:
    """Raise ``ValidationError`` naming ``field`` unless ``value`` is JSON-serializable and
    nests arrays and objects at most ``limit`` levels deep (a scalar is 0 levels, ``[]`` 1)."""
    _encoded(value, field, limit)


def _check_number(value: object, field: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError("must be a number or None", field=field)
    if not math.isfinite(value):
        raise ValidationError("must be a finite number", field=field)


def check_retry(value: object, field: str = "retry") -> RetryOverride | None:
    """``None`` or a :class:`~rdq.spi.RetryOverride` whose fields have their declared types
    (their values are the engine's to judge: it ignores one it cannot use)."""
    if value is None:
        return None
    if not isinstance(value, RetryOverride):
        raise ValidationError("must be an rdq.spi.RetryOverride or None", field=field)
    attempts = value.max_attempts
    if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int)):
        raise ValidationError("must be an integer or None", field=f"{field}.max_attempts")
    if value.backoff is not None and not isinstance(value.backoff, str):
        raise ValidationError("must be a string or None", field=f"{field}.backoff")
    for name in ("base", "cap", "timeout"):
        _check_number(getattr(value, name), f"{field}.{name}")
    return value


def _check_count(value: object, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError("must be an integer", field=field)
    if value < 0:
        raise ValidationError("must not be negative", field=field)


def check_task(task: object) -> Envelope:
    """Validate an envelope offered to ``enqueue``: ids, names, headers, counters, the retry
    override, the attempt records it carries, and the payload's size and nesting."""
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
    _check_count(task.attempt_count, "attempt_count")
    _check_count(task.redrive_count, "redrive_count")
    if task.next_attempt_at is not None:
        check_aware(task.next_attempt_at, "next_attempt_at")
    check_priority(task.priority)
    check_retry(task.retry)
    if not isinstance(task.attempts, list):
        raise ValidationError("must be a list of rdq.spi.Attempt", field="attempts")
    for i, record in enumerate(task.attempts):
        check_attempt(record, f"attempts[{i}]")
    if isinstance(task.format_version, bool) or not isinstance(task.format_version, int):
        raise ValidationError("must be an integer", field="format_version")
    if not isinstance(task.extra, dict):
        raise ValidationError("must be an object", field="extra")
    for name, value in task.extra.items():
        if not isinstance(name, str):
            raise ValidationError("unknown field names must be strings", field="extra")
        check_depth(value, name)
    if task.corrupt is not None:
        raise ValidationError("a task read back as corrupt cannot be stored", field="corrupt")
    size = len(_encoded(task.payload, "payload", MAX_DEPTH))
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
    """A list of at most ``MAX_SELECTOR_IDS`` valid task ids (a lone string is refused, not
    read as a list of one-character ids)."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Sequence):
        raise ValidationError("must be a list of task ids", field=field)
    if len(ids) > MAX_SELECTOR_IDS:
        raise ValidationError(f"more than {MAX_SELECTOR_IDS} ids", field=field)
    return [check_task_id(task_id, field=f"{field}[{i}]") for i, task_id in enumerate(ids)]


def check_tasks(tasks: object, field: str = "tasks") -> list[Envelope]:
    """A list of tasks, each valid for ``enqueue`` (checked in order, so a batch is refused
    exactly as its first bad ``enqueue`` would be)."""
    if isinstance(tasks, str | bytes) or not isinstance(tasks, Sequence):
        raise ValidationError("must be a list of rdq.spi.Envelope", field=field)
    return [check_task(task) for task in tasks]


def check_resolution(task_id: object, token: object, attempt: object) -> None:
    """The arguments every resolution (``reschedule``, ``complete``, ``dead_letter``) takes."""
    check_task_id(task_id)
    check_token(token)
    check_attempt(attempt)


def check_completions(completions: object) -> list[Completion]:
    """The items of ``complete_many``, every one checked before anything changes."""
    if isinstance(completions, str | bytes) or not isinstance(completions, Sequence):
        raise ValidationError("must be a list of rdq.spi.Completion", field="completions")
    for item in completions:
        if not isinstance(item, Completion):
            raise ValidationError("must be rdq.spi.Completion items", field="completions")
        check_resolution(item.task_id, item.token, item.attempt)
    return list(completions)


def check_wait(value: object, field: str = "timeout") -> float:
    """A ``wait_due`` timeout: a non-negative number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValidationError("must be a non-negative number of seconds", field=field)
    return float(value)


def check_delay(value: object, field: str = "delay") -> timedelta | None:
    """``None`` or a ``timedelta`` from 0 to ``MAX_DELAY``."""
    if value is None:
        return None
    if not isinstance(value, timedelta):
        raise ValidationError("must be a timedelta or None", field=field)
    if value < timedelta(0):
        raise ValidationError("must not be negative", field=field)
    if value > MAX_DELAY:
        raise ValidationError(f"must be at most {MAX_DELAY.days} days", field=field)
    return value


def check_priority(value: object, field: str = "priority") -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValidationError("must be an integer", field=field)
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise ValidationError(f"must be from {MIN_PRIORITY} to {MAX_PRIORITY}", field=field)
    return value


def check_worker_id(value: object, field: str = "worker_id") -> str | None:
    """``None`` or a worker id of 1–200 printable characters."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValidationError("must be a non-empty string or None", field=field)
    if len(value) > MAX_WORKER_ID_LENGTH:
        raise ValidationError(f"longer than {MAX_WORKER_ID_LENGTH} characters", field=field)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ValidationError("must not contain control characters", field=field)
    return value


def _check_text(value: object, limit: int, field: str) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise ValidationError("must be a string or None", field=field)
    if len(value) > limit:
        raise ValidationError(f"longer than {limit} characters", field=field)


def check_attempt(value: object, field: str = "attempt") -> Attempt:
    """An attempt record the engine hands to a resolution: its type, number, outcome and the
    length of its texts."""
    if not isinstance(value, Attempt):
        raise ValidationError("must be an rdq.spi.Attempt", field=field)
    if not isinstance(value.number, int) or isinstance(value.number, bool) or value.number < 1:
        raise ValidationError("must be an integer of at least 1", field=f"{field}.number")
    if not isinstance(value.outcome, Outcome):
        raise ValidationError("must be an rdq.spi.Outcome", field=f"{field}.outcome")
    _check_text(value.error_type, MAX_ERROR_TYPE_LENGTH, f"{field}.error_type")
    _check_text(value.error_message, MAX_ERROR_MESSAGE_LENGTH, f"{field}.error_message")
    _check_text(value.traceback, MAX_TRACEBACK_LENGTH, f"{field}.traceback")
    check_worker_id(value.worker_id, f"{field}.worker_id")
    for name in ("started_at", "finished_at"):
        at = getattr(value, name)
        if at is not None:
            check_aware(at, f"{field}.{name}")
    return value


_TIMESTAMPS = (
    "created_at",
    "next_attempt_at",
    "lease_expires_at",
    "claimed_at",
    "completed_at",
    "dead_lettered_at",
    "cancelled_at",
)


def check_imported_task(value: object) -> Envelope:
    """Validate a task offered to ``import_tasks``: everything ``check_task`` checks (a task
    read back as corrupt is refused, each attempt record valid), a known status,
    ``created_at`` and the time of its status (see :data:`rdq.spi.STATUS_TIME_FIELDS`) set,
    every timestamp timezone-aware and ``claimed_by`` a valid worker id."""
    task = check_task(value)
    if not isinstance(task.status, Status):
        raise ValidationError("must be an rdq.spi.Status", field="status")
    for name in ("created_at", STATUS_TIME_FIELDS[task.status]):
        if getattr(task, name) is None:
            raise ValidationError(f"must be set on an imported {task.status} task", field=name)
    for name in _TIMESTAMPS:
        at = getattr(task, name)
        if at is not None:
            check_aware(at, name)
    check_worker_id(task.claimed_by, "claimed_by")
    return task


def check_imported_tasks(tasks: object) -> list[Envelope]:
    """A list of at most ``MAX_LIMIT`` tasks, each valid for ``import_tasks``."""
    if isinstance(tasks, str | bytes) or not isinstance(tasks, Sequence):
        raise ValidationError("must be a list of rdq.spi.Envelope", field="tasks")
    if len(tasks) > MAX_LIMIT:
        raise ValidationError(f"more than {MAX_LIMIT} tasks", field="tasks")
    return [check_imported_task(task) for task in tasks]


def check_task_filter(value: object, field: str = "filter") -> TaskFilter:
    if not isinstance(value, TaskFilter):
        raise ValidationError("must be an rdq.spi.TaskFilter", field=field)
    if not isinstance(value.status, Status):
        raise ValidationError("must be an rdq.spi.Status", field=f"{field}.status")
    for name in ("after", "before"):
        at = getattr(value, name)
        if at is not None:
            check_aware(at, f"{field}.{name}")
    return value


def check_audit_entry(value: object, field: str = "entry") -> AuditEntry:
    if not isinstance(value, AuditEntry):
        raise ValidationError("must be an rdq.spi.AuditEntry", field=field)
    for name in ("actor", "action"):
        word = getattr(value, name)
        if not isinstance(word, str) or not word:
            raise ValidationError("must be a non-empty string", field=f"{field}.{name}")
        _check_text(word, MAX_AUDIT_WORD_LENGTH, f"{field}.{name}")
    check_queue(value.queue, f"{field}.queue")
    _check_text(value.reason, MAX_AUDIT_REASON_LENGTH, f"{field}.reason")
    _check_text(value.error, MAX_ERROR_MESSAGE_LENGTH, f"{field}.error")
    if not isinstance(value.count, int) or isinstance(value.count, bool) or value.count < 0:
        raise ValidationError("must be a non-negative integer", field=f"{field}.count")
    if not isinstance(value.selector, dict):
        raise ValidationError("must be an object", field=f"{field}.selector")
    return value


def check_audit_filter(value: object, field: str = "filter") -> AuditFilter:
    if not isinstance(value, AuditFilter):
        raise ValidationError("must be an rdq.spi.AuditFilter", field=field)
    for name in ("after", "before"):
        at = getattr(value, name)
        if at is not None:
            check_aware(at, f"{field}.{name}")
    return value
