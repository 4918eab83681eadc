"""Input checks the store applies beyond :mod:`rdq.spi.limits` (batches, resolution,
``wait_due``); each raises ``ValidationError`` naming the field before anything is touched."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rdq.errors import ValidationError
from rdq.spi import Envelope, limits

__all__ = ["check_resolution", "check_sequence", "check_timeout"]


def check_sequence(tasks: object, field: str = "tasks") -> Sequence[Any]:
    if isinstance(tasks, Envelope | str | bytes) or not isinstance(tasks, Sequence):
        raise ValidationError("must be a sequence of rdq.spi.Envelope", field=field)
    return tasks


def check_resolution(task_id: object, token: object, attempt: object) -> None:
    limits.check_task_id(task_id)
    limits.check_token(token)
    limits.check_attempt(attempt)


def check_timeout(timeout: object) -> float:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or math.isnan(timeout)
        or timeout < 0
    ):
        raise ValidationError("must be a number of seconds, 0 or more", field="timeout")
    return float(timeout)
