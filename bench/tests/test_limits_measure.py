"""The limits benchmark's arithmetic: tasks at once, the busiest window, the steady rate."""

from __future__ import annotations

import pytest
from bench.limits._measure import busiest_window, mean_at_once, most_at_once, steady_rate


def test_most_at_once_counts_overlaps_and_not_a_slot_handed_on() -> None:
    assert most_at_once([(0, 2), (1, 3), (1.5, 1.8)]) == 3
    assert most_at_once([(0, 1), (1, 2), (2, 3)]) == 1, "an end at a start is one slot"


def test_busiest_window_is_half_open() -> None:
    starts = [0.0, 0.5, 0.99, 1.0, 1.2]
    assert busiest_window(starts, 1.0) == 4, "[0.5, 1.5) holds 0.5, 0.99, 1.0 and 1.2"
    assert busiest_window([0.0, 1.0], 1.0) == 1


def test_mean_at_once_is_time_weighted_within_the_bounds() -> None:
    assert mean_at_once([(0, 10), (0, 5)], 0, 10) == pytest.approx(1.5)
    assert mean_at_once([(0, 10), (0, 5)], 5, 10) == pytest.approx(1.0)


def test_steady_rate_leaves_out_the_first_and_last_tenth() -> None:
    ends = [0.0] * 10 + [float(i) for i in range(1, 81)] + [1000.0] * 10
    assert steady_rate(ends) == pytest.approx(79 / 79)
