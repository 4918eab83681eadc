"""The kit's kill -9 chaos test against a real PostgreSQL (the checks it makes of a run are
tested on their own in rdq-compliance's tests/test_chaos_checks.py)."""

from __future__ import annotations

import pytest

from rdq_compliance.chaos import run_chaos


@pytest.mark.slow
@pytest.mark.asyncio
async def test_chaos_kill_9_workers(postgres_url: str) -> None:
    report = await run_chaos(postgres_url + "?schema=chaos")
    print(report.summary())
    report.assert_ok()
