"""Checks of single fields: ids, names, durations, times, texts, an attempt, a task."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from typing import Any

import msgspec

from rdq.errors import ValidationError
from rdq.spi._models import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    Attempt,
    Envelope,
    Outcome,
    RetryOverride,
)
from rdq.spi.bounds._values import (
    _BRACKET_STEPS,
    _HANDLER_RE,
    _ID_RE,
    _JSON_STRING_RE,
    _KEY_RE,
    _NOT_BRACKETS,
    _QUEUE_RE,
    MAX_CONTROL_KEY_LENGTH,
    MAX_DELAY,
    MAX_DEPTH,
    MAX_ERROR_MESSAGE_LENGTH,
    MAX_ERROR_TYPE_LENGTH,
    MAX_HANDLER_REF_LENGTH,
    MAX_HEADER_NAME_LENGTH,
    MAX_HEADER_VALUE_LENGTH,
    MAX_HEADERS,
    MAX_ID_LENGTH,
    MAX_LEASE,
    MAX_LIMIT,
    MAX_PAYLOAD_BYTES,
    MAX_QUEUE_LENGTH,
    MAX_TASK_KEY_LENGTH,
    MAX_TASK_KEYS,
    MAX_TRACEBACK_LENGTH,
    MAX_WORKER_ID_LENGTH,
    _encode_json,
)


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
    override, the attempt records it carries, and the payload's size and nesting.

    Fields in the form every new task has (no headers, keys or attempts, counters at 0) take
    the short way through the same rules, and a queue name or handler reference found valid
    before is not matched again (see ``_VALID_NAMES``): a batch of 1,000 new tasks is checked
    in about 0.9 ms, half of what it took without (``bench.e2e.batch_enqueue_experiment``)."""
    if not isinstance(task, Envelope):
        raise ValidationError("must be an rdq.spi.Envelope", field="task")
    check_task_id(task.id)
    queue = task.queue
    if type(queue) is not str or queue not in _valid_queues:
        _remember(_valid_queues, check_queue(queue))
    ref = task.handler_ref
    if type(ref) is not str or ref not in _valid_handler_refs:
        _remember(_valid_handler_refs, _check_handler_ref(ref))
    headers = task.headers
    if not isinstance(headers, dict):
        raise ValidationError("must be an object of strings", field="headers")
    if headers:
        _check_headers(headers)
    if type(task.attempt_count) is not int or task.attempt_count < 0:
        _check_count(task.attempt_count, "attempt_count")
    if type(task.redrive_count) is not int or task.redrive_count < 0:
        _check_count(task.redrive_count, "redrive_count")
    if task.next_attempt_at is not None:
        check_aware(task.next_attempt_at, "next_attempt_at")
    priority = task.priority
    if type(priority) is not int or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        check_priority(priority)
    if type(task.keys) is not list or task.keys:
        check_task_keys(task.keys)
    if task.retry is not None:
        check_retry(task.retry)
    attempts = task.attempts
    if not isinstance(attempts, list):
        raise ValidationError("must be a list of rdq.spi.Attempt", field="attempts")
    for i, record in enumerate(attempts):
        check_attempt(record, f"attempts[{i}]")
    if type(task.format_version) is not int and (
        isinstance(task.format_version, bool) or not isinstance(task.format_version, int)
    ):
        raise ValidationError("must be an integer", field="format_version")
    extra = task.extra
    if not isinstance(extra, dict):
        raise ValidationError("must be an object", field="extra")
    for name, value in extra.items():
        if not isinstance(name, str):
            raise ValidationError("unknown field names must be strings", field="extra")
        check_depth(value, name)
    if task.corrupt is not None:
        raise ValidationError("a task read back as corrupt cannot be stored", field="corrupt")
    _check_payload_bytes(len(_encoded(task.payload, "payload", MAX_DEPTH)), unknown=False)
    return task


def _check_handler_ref(ref: object) -> str:
    if not isinstance(ref, str) or not ref:
        raise ValidationError("must be a non-empty string", field="handler_ref")
    if len(ref) > MAX_HANDLER_REF_LENGTH:
        raise ValidationError(
            f"longer than {MAX_HANDLER_REF_LENGTH} characters", field="handler_ref"
        )
    if not _HANDLER_RE.fullmatch(ref):
        raise ValidationError("must not contain whitespace or control characters", "handler_ref")
    return ref


def _check_headers(headers: Mapping[Any, object]) -> None:
    if len(headers) > MAX_HEADERS:
        raise ValidationError(f"more than {MAX_HEADERS} headers", field="headers")
    for name, value in headers.items():
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_HEADER_NAME_LENGTH:
            raise ValidationError(
                f"header names must be 1-{MAX_HEADER_NAME_LENGTH} characters", field="headers"
            )
        if not isinstance(value, str) or len(value) > MAX_HEADER_VALUE_LENGTH:
            raise ValidationError(
                f"must be a string of at most {MAX_HEADER_VALUE_LENGTH} characters",
                field=f"headers.{name}",
            )


_VALID_NAMES = 4096
"""How many queue names and handler references ``check_task`` remembers as valid (each kind
on its own; forgotten all at once when full): a service submits to a few, and a name already
checked is valid again (a pure rule on an immutable ``str``)."""

_valid_queues: set[str] = set()
_valid_handler_refs: set[str] = set()


def _remember(valid: set[str], name: str) -> None:
    if type(name) is str:  # a subclass could compare equal to a name it does not spell
        if len(valid) >= _VALID_NAMES:
            valid.clear()
        valid.add(name)


def check_submitted_size(task: Envelope) -> None:
    """The size rule of a submitted task (the HTTP API's ``POST /v1/tasks``, where a caller
    may add fields rdq does not know): the payload's JSON plus, only when the task carries
    unknown fields, the JSON object they form, at most ``MAX_PAYLOAD_BYTES``.

    A task without unknown fields — every task the Python client submits — is held to its
    payload's bytes alone, exactly what :func:`check_task` limits, so a payload the client
    accepts at the limit is accepted by the API too."""
    size = len(_encode_json(task.payload))
    if task.extra:
        size += len(_encode_json(task.extra))
    _check_payload_bytes(size, unknown=bool(task.extra))


def _check_payload_bytes(size: int, *, unknown: bool) -> None:
    if size > MAX_PAYLOAD_BYTES:
        counted = "with the unknown fields, " if unknown else ""
        raise ValidationError(
            f"{counted}is {size} bytes encoded; the limit is {MAX_PAYLOAD_BYTES}",
            field="payload",
        )


def check_task_keys(value: object, field: str = "keys") -> list[str]:
    """A task's flow-control keys: at most ``MAX_TASK_KEYS``, each 1–200 characters without
    whitespace or control characters, none of them ``*`` or ``handler:…`` (keys every task
    has already)."""
    if not isinstance(value, list):
        raise ValidationError("must be a list of strings", field=field)
    if len(value) > MAX_TASK_KEYS:
        raise ValidationError(f"more than {MAX_TASK_KEYS} keys", field=field)
    if len(set(value)) != len(value):
        raise ValidationError("must not name a key twice", field=field)
    for i, key in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_TASK_KEY_LENGTH:
            raise ValidationError(f"must be 1-{MAX_TASK_KEY_LENGTH} characters", field=where)
        if not _KEY_RE.fullmatch(key):
            raise ValidationError("must not contain whitespace or control characters", where)
        if key == "*" or key.startswith("handler:"):
            raise ValidationError("'*' and 'handler:…' are every task's keys already", where)
    return value


def check_control_key(value: object, field: str = "key") -> str:
    """A control's key: ``*``, ``handler:<handler_ref>``, or a task key."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_CONTROL_KEY_LENGTH:
        raise ValidationError(f"must be 1-{MAX_CONTROL_KEY_LENGTH} characters", field=field)
    if not _KEY_RE.fullmatch(value):
        raise ValidationError("must not contain whitespace or control characters", field)
    return value


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
