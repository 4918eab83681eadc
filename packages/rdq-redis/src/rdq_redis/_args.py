"""The arguments the scripts take, built from the contract's types, and the input checks the
store makes beyond :mod:`rdq.spi.limits`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from rdq.errors import ValidationError
from rdq.spi import (
    STATUS_TIME_FIELDS,
    Completion,
    DLQFilter,
    Envelope,
    Selector,
    limits,
    status_time,
)
from rdq_redis._codec import (
    TIME_FIELDS,
    attempt_json,
    attempts_json,
    envelope_body,
    error_arg,
    to_us,
)
from rdq_redis._keys import QueueKeys
from rdq_redis._pages import STATUS_SETS

__all__ = [
    "attempt_json",
    "check_completions",
    "check_timeout",
    "enqueue_row",
    "group_label",
    "import_row",
    "micros",
    "selector_args",
    "token_queue",
]

_US = timedelta(microseconds=1)


def micros(delta: timedelta) -> int:
    return delta // _US


def token_queue(token: str) -> str | None:
    """The queue a claim token of this store names (``<queue>/<random>``), or None."""
    queue, _, _ = token.rpartition("/")
    try:
        return limits.check_queue(queue)
    except ValidationError:
        return None


def enqueue_row(task: Envelope, qk: QueueKeys, delay_us: int) -> list[Any]:
    """The 13 per-task values ``enqueue.lua`` reads."""
    last_error = task.attempts[-1].error_type if task.attempts else None
    return [
        task.queue,
        task.id,
        qk.base,
        envelope_body(task),
        "" if task.next_attempt_at is None else str(to_us(task.next_attempt_at)),
        delay_us,
        task.attempt_count,
        task.redrive_count,
        attempts_json(task.attempts),
        task.handler_ref,
        error_arg(last_error),
        qk.wake,
        task.priority,
    ]


def import_row(task: Envelope, qk: QueueKeys) -> list[Any]:
    """The per-task values ``import_tasks.lua`` reads: where the task is indexed, then every
    hash field it is stored with."""
    fields: list[Any] = [
        "body",
        envelope_body(task),
        "status",
        str(task.status),
        "attempt_count",
        task.attempt_count,
        "redrive_count",
        task.redrive_count,
        "attempts",
        attempts_json(task.attempts),
        "handler_ref",
        task.handler_ref,
        "priority",
        task.priority,
    ]
    last_error = task.attempts[-1].error_type if task.attempts else None
    if last_error is not None:
        fields += ["error_type", last_error]
    if task.claimed_by is not None:
        fields += ["claimed_by", task.claimed_by]
    for name in TIME_FIELDS:
        at = getattr(task, name)
        if at is not None:
            fields += [name, str(to_us(at))]
    at = status_time(task)
    return [
        task.queue,
        task.id,
        qk.base,
        STATUS_SETS[task.status],
        task.priority,
        "" if at is None else str(to_us(at)),
        STATUS_TIME_FIELDS[task.status],
        qk.wake,
        len(fields) // 2,
        *fields,
    ]


def check_completions(completions: Sequence[Completion]) -> None:
    """Validate every item of a ``complete_many`` call before anything changes."""
    for i, item in enumerate(completions):
        if not isinstance(item, Completion):
            raise ValidationError("must be rdq.spi.Completion items", field="completions")
        limits.check_task_id(item.task_id, f"completions[{i}].task_id")
        limits.check_token(item.token, f"completions[{i}].token")
        limits.check_attempt(item.attempt, f"completions[{i}].attempt")


def check_timeout(timeout: object) -> None:
    if (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or not timeout >= 0  # NaN too
    ):
        raise ValidationError("must be a non-negative number of seconds", field="timeout")


def _filter_args(dlq_filter: DLQFilter | None) -> list[str]:
    """(min score, max score, handler filter, error filter) for ``select_ids``."""
    f = dlq_filter or DLQFilter()
    low = "-inf" if f.dead_lettered_after is None else str(to_us(f.dead_lettered_after))
    high = "+inf" if f.dead_lettered_before is None else f"({to_us(f.dead_lettered_before)}"
    return [low, high, error_arg(f.handler_ref), error_arg(f.error_type)]


def selector_args(selector: Selector) -> list[str]:
    if selector.ids is not None:
        return ["ids", *selector.ids]
    return ["filter", *_filter_args(selector.filter)]


def group_label(label: bytes) -> tuple[str, str | None]:
    """(handler_ref, error_type) of a DLQ group label: ``<len>:<handler_ref>[=<error_type>]``
    (the length counts bytes)."""
    length, _, rest = label.partition(b":")
    size = int(length)
    handler, error = rest[:size], rest[size:]
    text = handler.decode("utf-8", "replace")
    return text, error[1:].decode("utf-8", "replace") if error else None
