"""A drain's WAL and commit accounting (``bench.e2e.pg_counters``) and how the report shows it."""

from __future__ import annotations

import pytest
from bench.e2e.pg_counters import Counters, cost, lsn_bytes
from bench.e2e.report import Results, durability_line, rows_lines


def test_lsn_text_is_a_byte_position() -> None:
    assert lsn_bytes("0/0") == 0
    assert lsn_bytes("0/16B3748") == 0x16B3748
    assert lsn_bytes("16/B374D848") == (0x16 << 32) + 0xB374D848
    with pytest.raises(ValueError):
        lsn_bytes("16B374D848")


def test_cost_takes_the_wal_to_the_last_completion_and_leaves_out_the_harness() -> None:
    before = Counters("0/FFFFF000", 1_000)
    wal_end = Counters("1/00001000", 1_200)  # across the 4 GiB boundary of the text's halves
    commits_end = Counters("1/00002000", 1_260)
    drain = cost(before, wal_end, commits_end, tasks=100, harness_reads=20)
    assert drain.wal_bytes == 0x2000
    assert drain.wal_per_task == pytest.approx(81.92)
    assert drain.commits == 240, "the commits to the workers' exit, less the harness's 20"
    assert drain.commits_per_task == pytest.approx(2.4)


def test_cost_takes_the_servers_own_difference_when_it_has_it() -> None:
    before = Counters("0/1000", 0)
    drain = cost(before, Counters("0/3000", 5, wal_since=0x2000), Counters("0/4000", 9), 2, 1)
    assert drain.wal_bytes == 0x2000 and drain.commits == 8


def test_cost_refuses_counters_that_went_backwards_or_no_task() -> None:
    before = Counters("0/2000", 10)
    with pytest.raises(ValueError):
        cost(before, Counters("0/1000", 10), Counters("0/2000", 10), 1, 0)
    with pytest.raises(ValueError, match="commits"):
        cost(before, Counters("0/3000", 10), Counters("0/3000", 12), 1, 5)
    with pytest.raises(ValueError):
        cost(before, before, before, 0, 0)


def test_wal_and_commits_come_after_the_cpu_figures_lower_is_better() -> None:
    results = Results(["rdq", "pgqueuer"])
    for system, wal, commits in (("rdq", 900.0, 0.2), ("pgqueuer", 1800.0, 0.4)):
        results.add(system, "drain_1", 1000.0)
        results.add(system, "cpu_db_1", 50.0)
        results.add(system, "commits_per_task_1", commits)
        results.add(system, "wal_per_task_1", wal)
        results.add(system, "wal_per_task_8", wal)
    assert results.keys() == [
        "drain_1",
        "cpu_db_1",
        "wal_per_task_1",
        "commits_per_task_1",
        "wal_per_task_8",
    ]
    rows = results.table().splitlines()
    line = next(r for r in rows if r.startswith("| WAL per task, drain with 1"))
    assert "(lower is better)" in line and "| B |" in line.replace("  ", "")
    assert line.rstrip(" |").endswith("0.50×")
    summary = {(r["system"], r["metric"]): r for r in results.summary()}
    assert summary[("pgqueuer", "commits_per_task_1")]["rdq_ratio"] == 0.5
    assert summary[("rdq", "commits_per_task_1")]["unit"] == "commits"


def test_durability_and_rows_left_lines() -> None:
    settings = {"fsync": "on", "synchronous_commit": "on", "shared_buffers": "128MB"}
    assert durability_line(settings) == "PostgreSQL durability: fsync=on, synchronous_commit=on"
    assert durability_line({}) == "PostgreSQL durability: not read"
    rows: dict[str, dict[str, dict[str, int]]] = {
        "rdq": {"drain_1": {"rdq.task": 1200, "rdq.task[SUCCEEDED]": 1200}},
        "graphile_worker": {"drain_8": {}},
    }
    assert rows_lines(rows) == [
        "rows left, rdq after drain_1: rdq.task 1,200, rdq.task[SUCCEEDED] 1,200",
        "rows left, graphile_worker after drain_8: none",
    ]
