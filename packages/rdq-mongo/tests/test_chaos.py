"""The kit's kill -9 chaos test against the Mongo test server."""

from __future__ import annotations

import pytest

from rdq_compliance.chaos import run_chaos


@pytest.mark.slow
@pytest.mark.asyncio
async def test_chaos_kill_9_workers(database_url: str) -> None:
    report = await run_chaos(database_url, timeout=240.0)
    print(report.summary())
    report.assert_ok()
