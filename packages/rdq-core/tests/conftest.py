"""What every rdq-core test shares: how the tests on simulated time (marked ``looptime``)
advance it, the slow tests first, and logging as each test found it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog

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
    # the tests marked slow first (a stable sort: each keeps its place among its kind), so
    # xdist hands them out at the start, one to each process, rather than last: the run
    # ends when its longest process does, and a 50 s test started last was its tail
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _structlog_as_it_was() -> Iterator[None]:
    """Each test finds structlog as the one before found it. A CLI command run in this
    process (click's CliRunner) configures it for the process, as ``rdq`` does, and
    ``structlog.testing.capture_logs`` leaves it configured with structlog's defaults, which
    print to standard output: a node started by a later test would then write its log lines
    into the output of a CLI command that test parses."""
    configured, saved = structlog.is_configured(), structlog.get_config()
    yield
    if configured:
        structlog.configure(**saved)
    else:
        structlog.reset_defaults()
