"""Crash recovery across processes: the kill -9 chaos test."""

from __future__ import annotations

import pytest

from rdq_compliance._fixtures import require_url
from rdq_compliance.chaos import run_chaos

__all__ = ["CrashClauses"]


class CrashClauses:
    """A worker process SIGKILLed mid-handler loses its lease, the task is reclaimed with a
    ``LEASE_EXPIRED`` record, and no task is ever held by two workers at once."""

    @pytest.mark.asyncio
    async def test_chaos_kill9_worker_mid_handler_is_recovered_without_double_claims(
        self, storage_url: str | None
    ) -> None:
        report = await run_chaos(require_url(storage_url, "storage_url"))
        report.assert_ok()
