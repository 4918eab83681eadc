"""The kit's kill -9 chaos test against a real Redis."""

from __future__ import annotations

import pytest

from rdq_compliance.chaos import run_chaos


@pytest.mark.slow
@pytest.mark.asyncio
async def test_chaos_kill_9_workers(storage_url: str) -> None:
    report = await run_chaos(storage_url)
    print(report.summary())
    report.assert_ok()
