"""bench.xmin's control-table lines and its limits."""

from __future__ import annotations

from bench.xmin import _control
from bench.xmin.app import LIMITS

import rdq


def test_control_lines_show_before_and_after_each_phase() -> None:
    before = _control.ControlSize(heap=8192, indexes=32768, total=49152, live=1, dead=3)
    after = _control.ControlSize(heap=40960, indexes=32768, total=106496, live=1, dead=87)
    header, clean, held = _control.report_lines(
        [("clean", before, before), ("held", before, after)]
    )
    assert header.startswith("rdq.control: phase")
    assert "8,192 → 8,192" in clean
    assert "8,192 → 40,960" in held and "49,152 → 106,496" in held and "3 → 87" in held


def test_the_limits_do_not_bind_two_workers_of_concurrency_ten() -> None:
    assert LIMITS["none"] == []
    (concurrency,) = LIMITS["concurrency"]
    (rate,) = LIMITS["rate"]
    assert isinstance(concurrency, rdq.Concurrency) and concurrency.limit >= 1000
    assert isinstance(rate, rdq.Rate) and rate.rate >= 1_000_000
    assert rate.burst is not None and rate.burst >= 1_000_000
