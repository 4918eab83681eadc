"""The operation timeout of the Java store: a statement stuck behind a lock is stopped by the
server (``statement_timeout``) and the call raises ``StorageUnavailable``, leaving the row as
it was."""

from __future__ import annotations

import time
from datetime import timedelta

import asyncpg
import pytest

from rdq.errors import StorageUnavailable
from rdq.spi import Attempt, Envelope, Outcome, Status
from rdq_java_bridge import JavaBridgeStorage


@pytest.mark.asyncio
async def test_a_statement_past_the_operation_timeout_raises_storage_unavailable(
    postgres_url: str, python_url: str, java_url: str
) -> None:
    schema = python_url.rsplit("schema=", 1)[1]
    async with JavaBridgeStorage.from_url(f"{java_url}&timeout=0.5") as java:
        await java.migrate()
        await java.enqueue(Envelope(id="locked-task", queue="timeouts", handler_ref="h"))
        (claimed,) = await java.claim_due("timeouts", 1, timedelta(minutes=5))
        blocker = await asyncpg.connect(postgres_url)
        try:
            locking = blocker.transaction()
            await locking.start()
            await blocker.execute(
                f"SELECT 1 FROM \"{schema}\".task WHERE id = 'locked-task' FOR UPDATE"
            )
            started = time.monotonic()
            with pytest.raises(StorageUnavailable):
                await java.complete(
                    "locked-task", claimed.token, Attempt(number=1, outcome=Outcome.SUCCEEDED)
                )
            waited = time.monotonic() - started
            await locking.rollback()
        finally:
            await blocker.close()
        # the default timeout is 10 s: giving up well before it is the 0.5 s option at work
        assert waited < 5, f"the call gave up after {waited:.1f}s, not near its 0.5 s timeout"
        task = await java.get("locked-task")
        assert task.status == Status.IN_FLIGHT and task.attempts == []
        await java.complete(
            "locked-task", claimed.token, Attempt(number=1, outcome=Outcome.SUCCEEDED)
        )
