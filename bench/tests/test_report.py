"""The benchmark's arithmetic: percentiles, medians, rdq/peer ratios and the table."""

from __future__ import annotations

import pytest
from bench.e2e.report import Results, percentile


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100, shuffled order must not matter
    values.reverse()
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([7.0], 99) == 7.0


def test_summary_reports_medians_and_rdq_over_peer() -> None:
    results = Results(["rdq", "pgqueuer"])
    for value in (100.0, 300.0, 200.0):
        results.add("rdq", "drain_1", value)
    for value in (50.0, 100.0, 150.0):
        results.add("pgqueuer", "drain_1", value)
    summary = {(r["system"], r["metric"]): r for r in results.summary()}
    assert summary[("rdq", "drain_1")]["median"] == 200.0
    assert summary[("pgqueuer", "drain_1")]["median"] == 100.0
    assert summary[("pgqueuer", "drain_1")]["rdq_ratio"] == 2.0
    assert "rdq_ratio" not in summary[("rdq", "drain_1")]


def test_table_shows_each_system_and_the_ratio() -> None:
    results = Results(["rdq", "procrastinate"])
    results.add("rdq", "latency_notify_p50", 4.0)
    results.add("procrastinate", "latency_notify_p50", 8.0)
    results.add("rdq", "latency_poll_p50", 250.0)
    table = results.table()
    header, _, notify, poll = table.splitlines()
    assert "rdq/procrastinate" in header
    assert "lower is better" in notify
    assert notify.rstrip(" |").endswith("0.50×")
    assert "—" in poll  # procrastinate has no polling figure: no ratio either


def test_unknown_metric_is_refused() -> None:
    with pytest.raises(KeyError):
        Results(["rdq"]).add("rdq", "nonsense", 1.0)
