"""Backoff: how long to wait before the next attempt of a task that failed."""

from __future__ import annotations

import random

from rdq.config import Backoff, BackoffKind

__all__ = ["backoff_bounds", "backoff_delay"]

_MAX_EXPONENT = 62  # 2**62 seconds is far past any cap; keeps the power finite


def backoff_bounds(backoff: Backoff, attempt: int) -> tuple[float, float]:
    """The smallest and largest delay (seconds) ``backoff`` may choose after attempt number
    ``attempt`` (1-based) failed."""
    n = max(1, attempt)
    if backoff.kind is BackoffKind.FIXED:
        return backoff.base, backoff.base
    if backoff.kind is BackoffKind.LINEAR:
        high = min(backoff.cap, backoff.base * n)
        return high, high
    high = min(backoff.cap, backoff.base * 2.0 ** min(n - 1, _MAX_EXPONENT))
    return 0.0, high


def backoff_delay(backoff: Backoff, attempt: int, rng: random.Random | None = None) -> float:
    """The delay (seconds) before the retry that follows failed attempt number ``attempt``.

    Exponential backoff uses full jitter: a uniform draw from ``[0, min(cap, base*2**(n-1))]``,
    which spreads retries of tasks that failed together."""
    low, high = backoff_bounds(backoff, attempt)
    if low == high:
        return high
    return (rng or random).uniform(low, high)
