"""The kit's kill -9 chaos test against a real PostgreSQL."""

from __future__ import annotations

import pytest

from rdq_compliance.chaos import run_chaos


@pytest.mark.slow
@pytest.mark.asyncio
async def test_chaos_kill_9_workers(postgres_url: str) -> None:
    report = await run_chaos(postgres_url + "?schema=chaos")
    print(report.summary())
    report.assert_ok()


def test_the_chaos_check_catches_overlapping_leases_and_double_completions() -> None:
    from rdq.spi import Attempt, Envelope, Outcome, Status
    from rdq_compliance.chaos import ChaosReport, _check

    task = Envelope(
        id="t",
        queue="q",
        handler_ref="m:f",
        status=Status.SUCCEEDED,
        attempt_count=2,
        attempts=[
            Attempt(number=1, outcome=Outcome.LEASE_EXPIRED),
            Attempt(number=2, outcome=Outcome.SUCCEEDED, worker_id="chaos-2"),
        ],
    )
    log = """\
claim t tok1 2026-01-01T00:00:00+00:00 2026-01-01T00:00:01+00:00 1
claim t tok2 2026-01-01T00:00:00.500000+00:00 2026-01-01T00:00:01.5+00:00 2
done t tok1 1
done t tok2 2
"""
    lines = [line.split() for line in log.splitlines()]
    report = ChaosReport(queue="q", tasks=1, kills=1)
    _check(report, {"t": task}, lines)
    assert any("double claim" in p for p in report.problems)
    assert any("completed 2 times" in p for p in report.problems)
    with pytest.raises(AssertionError):
        report.assert_ok()
