"""The workers' record of the tasks they ran (``bench.e2e.ledger``) and the ``rdq_discard``
row's check of the installed rdq."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest
from bench.e2e import ledger


def test_records_of_several_processes_add_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.getpid", lambda: 101)
    ledger.write(tmp_path / "ledger", [0, 2])
    monkeypatch.setattr("os.getpid", lambda: 102)
    ledger.write(tmp_path / "ledger", [1, 2])
    assert ledger.runs(tmp_path / "ledger") == Counter({0: 1, 1: 1, 2: 2})
    assert ledger.runs(tmp_path / "none") == Counter()


def test_problems_name_twice_never_and_unknown() -> None:
    assert ledger.problems(Counter({0: 1, 1: 1, 2: 1}), 3) == []
    found = ledger.problems(Counter({0: 2, 2: 1, 7: 1}), 3)
    assert found == [
        "1 tasks ran more than once (first: [0])",
        "1 tasks never ran (first: [1])",
        "1 unknown task numbers ran (first: [7])",
    ]


def test_ledger_dir_is_one_per_url() -> None:
    a = ledger.ledger_dir("postgresql://h/bench_rdq_discard")
    assert a == ledger.ledger_dir("postgresql://h/bench_rdq_discard")
    assert a != ledger.ledger_dir("postgresql://h/bench_graphile_worker")


def test_rdq_discard_is_unavailable_without_keep_succeeded() -> None:
    pytest.importorskip("asyncpg")
    from bench.e2e import rdq_discard_runner

    @dataclasses.dataclass
    class Without:
        concurrency: int = 10

    @dataclasses.dataclass
    class With:
        concurrency: int = 10
        keep_succeeded: bool = True

    why = rdq_discard_runner.unavailable(Without)
    assert why is not None and "keep_succeeded" in why
    assert rdq_discard_runner.unavailable(With) is None
