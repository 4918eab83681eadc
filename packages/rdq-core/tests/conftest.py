"""What every rdq-core test shares: how the tests on simulated time (marked ``looptime``)
advance it."""

from __future__ import annotations

import pytest

NOOP_CYCLES = 1
"""Idle rounds of the event loop before looptime moves its clock to the next timer (its
default, 42, leaves time for a thread or a socket to wake the loop first). The tests on
simulated time run on the memory store, where nothing outside the loop wakes it: one round
settles what is ready, and the breaker tests take half the time."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("looptime") is not None:
            # appended: a test's own looptime options still win
            item.add_marker(pytest.mark.looptime(noop_cycles=NOOP_CYCLES))
