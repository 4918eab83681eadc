"""Small checks of configuration values that the settings classes share."""

from __future__ import annotations

import math
from typing import TypeGuard

__all__ = ["is_int", "is_number", "seconds_or"]


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def seconds_or(value: object, default: float) -> float:
    if is_number(value) and 0 <= value < math.inf:
        return float(value)
    return default
