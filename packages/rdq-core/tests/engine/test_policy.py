"""Backoff policies stay within their bounds."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

import rdq
from rdq.retry._backoff import backoff_bounds, backoff_delay


def test_fixed_and_linear_bounds():
    assert backoff_bounds(rdq.Backoff.fixed(3), 1) == (3, 3)
    assert backoff_bounds(rdq.Backoff.fixed(3), 50) == (3, 3)
    assert backoff_bounds(rdq.Backoff.linear(2, 7), 1) == (2, 2)
    assert backoff_bounds(rdq.Backoff.linear(2, 7), 3) == (6, 6)
    assert backoff_bounds(rdq.Backoff.linear(2, 7), 4) == (7, 7)


def test_exponential_grows_then_caps():
    b = rdq.Backoff.exponential(base=1, cap=30)
    assert [backoff_bounds(b, n)[1] for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert backoff_bounds(b, 10_000) == (0, 30)


@given(
    base=st.floats(0, 100),
    extra=st.floats(0, 1000),
    attempt=st.integers(1, 10_000),
    seed=st.integers(0, 2**32),
)
def test_exponential_full_jitter_stays_in_bounds(base, extra, attempt, seed):
    b = rdq.Backoff.exponential(base=base, cap=base + extra)
    low, high = backoff_bounds(b, attempt)
    delay = backoff_delay(b, attempt, random.Random(seed))
    assert low <= delay <= high <= base + extra


def test_full_jitter_spreads_delays():
    b = rdq.Backoff.exponential(base=10, cap=10)
    rng = random.Random(1)
    delays = {round(backoff_delay(b, 1, rng), 3) for _ in range(50)}
    assert len(delays) > 40
