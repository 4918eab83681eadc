"""The chaos run's verdicts: what its checks call a violation, and when a run counts as stuck.

The run itself needs worker processes that reach the store (every backend's kit runs it);
here its checks get made-up histories, so each violation is shown to be caught."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rdq.spi import Attempt, Envelope, Outcome, Status
from rdq_compliance.chaos import ChaosReport, _check, _Watch, run_chaos

T0 = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def claim(task_id: str, start: float, pid: str, token: str | None = None) -> list[str]:
    ends = at(start) + LEASE
    return [
        "claim",
        task_id,
        token or f"tok-{pid}-{start}",
        at(start).isoformat(),
        ends.isoformat(),
        pid,
    ]


def done(task_id: str, pid: str) -> list[str]:
    return ["done", task_id, "tok", pid]


def lost(number: int, start: float) -> Attempt:
    return Attempt(number=number, outcome=Outcome.LEASE_EXPIRED, started_at=at(start))


def succeeded(number: int, pid: str) -> Attempt:
    return Attempt(number=number, outcome=Outcome.SUCCEEDED, worker_id=f"chaos-{pid}")


def stored(task_id: str, *attempts: Attempt, status: Status = Status.SUCCEEDED) -> Envelope:
    return Envelope(
        id=task_id,
        queue="chaos",
        handler_ref="chaos:task",
        status=status,
        attempts=list(attempts),
        attempt_count=len(attempts),
    )


def problems(
    tasks: list[Envelope], lines: list[list[str]], killed: list[list[str]] | None = None
) -> list[str]:
    report = ChaosReport(queue="chaos", tasks=len(tasks))
    _check(report, {t.id: t for t in tasks}, lines, killed or [])
    return report.problems


def test_a_killed_claim_reclaimed_with_its_lease_expired_record_passes() -> None:
    killed = claim("a", 0, "1")
    lines = [killed, claim("a", 1.5, "2"), done("a", "2"), claim("b", 0, "2"), done("b", "2")]
    tasks = [stored("a", lost(1, 0), succeeded(2, "2")), stored("b", succeeded(1, "2"))]
    assert problems(tasks, lines, [killed]) == []


def test_a_worker_killed_after_its_completion_committed_passes() -> None:
    killed = claim("a", 0, "1")
    assert problems([stored("a", succeeded(1, "1"))], [killed], [killed]) == []


def test_overlapping_leases_are_a_double_claim() -> None:
    lines = [claim("a", 0, "1"), claim("a", 0.5, "2"), done("a", "2")]
    tasks = [stored("a", lost(1, 0), succeeded(2, "2"))]
    assert any("double claim" in p for p in problems(tasks, lines))


def test_a_reclaim_without_its_lease_expired_record_is_caught() -> None:
    killed = claim("a", 0, "1")
    lines = [killed, claim("a", 1.5, "2"), done("a", "2")]
    found = problems([stored("a", succeeded(1, "2"))], lines, [killed])
    assert any("2 claims logged but only 1 attempts" in p for p in found)
    assert any("no LEASE_EXPIRED record is of that claim" in p for p in found)


def test_a_lease_expired_record_of_another_claim_does_not_count_for_the_killed_one() -> None:
    killed = claim("a", 3, "1")
    lines = [claim("a", 0, "9"), killed, claim("a", 4.5, "2"), done("a", "2")]
    # two lapsed claims but both records name the first one's start
    tasks = [stored("a", lost(1, 0), lost(2, 0), succeeded(3, "2"))]
    assert any("pid 1 was killed holding it" in p for p in problems(tasks, lines, [killed]))


def test_a_task_completed_twice_or_left_unfinished_is_caught() -> None:
    lines = [claim("a", 0, "1"), done("a", "1"), claim("a", 1.5, "2"), done("a", "2")]
    tasks = [
        stored("a", lost(1, 0), succeeded(2, "2")),
        stored("b", status=Status.PENDING),
    ]
    found = problems(tasks, lines)
    assert any("completed 2 times" in p for p in found)
    assert any("b: status PENDING" in p for p in found)


def test_a_token_handed_out_twice_is_caught() -> None:
    lines = [claim("a", 0, "1", token="same"), claim("a", 1.5, "2", token="same"), done("a", "2")]
    tasks = [stored("a", lost(1, 0), succeeded(2, "2"))]
    assert any("handed out twice" in p for p in problems(tasks, lines))


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_run_that_keeps_moving_is_never_stuck_until_its_cap() -> None:
    clock = FakeClock()
    watch = _Watch(stall=60, cap=600, clock=clock)
    for step in range(1, 120):
        clock.now = step * 5.0
        assert watch.stuck(succeeded=step // 3, lines=step) is None
    clock.now = 601.0
    assert watch.stuck(succeeded=500, lines=500) == "the run outlasted its cap of 600s"


def test_a_run_where_nothing_moves_for_the_stall_window_is_stuck() -> None:
    clock = FakeClock()
    watch = _Watch(stall=60, cap=600, clock=clock)
    clock.now = 59.0
    assert watch.stuck(succeeded=0, lines=0) is None, "start-up takes time"
    clock.now = 100.0
    assert watch.stuck(succeeded=0, lines=4) is None, "workers came up: that is progress"
    clock.now = 159.0
    assert watch.stuck(succeeded=0, lines=4) is None
    clock.now = 161.0
    assert watch.stuck(succeeded=0, lines=4) == "nothing moved for 60s"


@pytest.mark.asyncio
async def test_a_run_without_workers_fails_as_stuck_after_the_stall_window() -> None:
    report = await run_chaos("memory://", workers=0, tasks=3, stall=0.5)
    assert report.kills == 0
    assert any("nothing moved for 0.5s" in p and "0/3 succeeded" in p for p in report.problems)
    with pytest.raises(AssertionError, match="no worker was killed"):
        report.assert_ok()
