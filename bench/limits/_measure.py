"""The benchmark's arithmetic over the handlers' (start, end) times."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["busiest_window", "mean_at_once", "median", "most_at_once", "quantile", "steady_rate"]


def most_at_once(intervals: Sequence[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end at the instant of a start closes
    first: a slot handed from one task to the next is not two at once)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = current = 0
    for _, step in events:
        current += step
        best = max(best, current)
    return best


def busiest_window(starts: Sequence[float], window: float) -> int:
    """The most starts in any half-open window ``[t, t + window)``."""
    ordered = sorted(starts)
    best = first = 0
    for last, t in enumerate(ordered):
        while ordered[first] <= t - window:
            first += 1
        best = max(best, last - first + 1)
    return best


def steady_rate(ends: Sequence[float], trim: float = 0.1) -> float:
    """Tasks per second between the ``trim`` and ``1 - trim`` quantiles of the ends: the
    drain's rate once every worker process is up and before the last ones run dry."""
    ordered = sorted(ends)
    low, high = int(len(ordered) * trim), int(len(ordered) * (1 - trim)) - 1
    span = ordered[high] - ordered[low]
    return (high - low) / span if span > 0 else float("inf")


def mean_at_once(intervals: Sequence[tuple[float, float]], low: float, high: float) -> float:
    """The time-weighted mean of the intervals open at once between ``low`` and ``high``."""
    if high <= low:
        return 0.0
    covered = sum(max(0.0, min(e, high) - max(s, low)) for s, e in intervals)
    return covered / (high - low)


def quantile(values: Sequence[float], q: float) -> float:
    """The value at quantile ``q`` (nearest rank below)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)
