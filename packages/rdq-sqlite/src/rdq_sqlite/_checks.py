"""Input checks the store applies beyond :mod:`rdq.spi.limits` (import, resolution, cancel,
``wait_due``); each raises ``ValidationError`` naming the field before anything is touched."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rdq.errors import ValidationError
from rdq.spi import Envelope, Status, limits

__all__ = [
    "check_cancel_ids",
    "check_imported",
    "check_resolution",
    "check_sequence",
    "check_timeout",
]

_TIMES = (
    "created_at",
    "lease_expires_at",
    "claimed_at",
    "completed_at",
    "dead_lettered_at",
    "cancelled_at",
)


def check_sequence(tasks: object, field: str = "tasks") -> Sequence[Any]:
    if isinstance(tasks, Envelope | str | bytes) or not isinstance(tasks, Sequence):
        raise ValidationError("must be a sequence of rdq.spi.Envelope", field=field)
    return tasks


def check_resolution(task_id: object, token: object, attempt: object) -> None:
    limits.check_task_id(task_id)
    limits.check_token(token)
    limits.check_attempt(attempt)


def check_imported(tasks: object) -> None:
    """Tasks offered to ``import_tasks``: at most ``MAX_LIMIT``, each a valid envelope with
    aware times, a known status and valid attempt records (never one read back corrupt)."""
    tasks = check_sequence(tasks)
    if len(tasks) > limits.MAX_LIMIT:
        raise ValidationError(f"more than {limits.MAX_LIMIT} tasks", field="tasks")
    for index, task in enumerate(tasks):
        field = f"tasks[{index}]"
        if not isinstance(task, Envelope):
            raise ValidationError("must be an rdq.spi.Envelope", field=field)
        limits.check_task(task)
        if not isinstance(task.status, Status):
            raise ValidationError("must be an rdq.spi.Status", field=f"{field}.status")
        for name in _TIMES:
            at = getattr(task, name)
            if at is not None:
                limits.check_aware(at, f"{field}.{name}")
        limits.check_worker_id(task.claimed_by, f"{field}.claimed_by")
        if not isinstance(task.attempts, list):
            raise ValidationError("must be a list of rdq.spi.Attempt", field=f"{field}.attempts")
        for number, attempt in enumerate(task.attempts):
            limits.check_attempt(attempt, f"{field}.attempts[{number}]")


def check_cancel_ids(task_ids: object) -> list[str]:
    if isinstance(task_ids, str) or not isinstance(task_ids, Sequence):
        raise ValidationError("must be a sequence of task ids", field="ids")
    if len(task_ids) > limits.MAX_SELECTOR_IDS:
        raise ValidationError(f"more than {limits.MAX_SELECTOR_IDS} ids", field="ids")
    return limits.check_ids(task_ids)


def check_timeout(timeout: object) -> float:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or math.isnan(timeout)
        or timeout < 0
    ):
        raise ValidationError("must be a number of seconds, 0 or more", field="timeout")
    return float(timeout)
