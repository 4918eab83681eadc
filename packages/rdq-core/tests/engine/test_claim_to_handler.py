"""A claimed task starts at once: the worker hands it to its handler before it sends the next
claim, so no task waits on a round trip that is not its own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rdq
from rdq.spi import Storage
from rdq_compliance.testing import FaultyStorage
from rdq_memory import MemoryStorage

from .conftest import fast_worker, running

pytestmark = pytest.mark.asyncio


class ClaimsSeen(FaultyStorage):
    """Records, at each ``claim_due`` sent after the first task was claimed, whether that
    task's handler had started."""

    def __init__(self, inner: Storage, started: asyncio.Event) -> None:
        super().__init__(inner, {})
        self.started = started
        self.claimed = False
        self.handler_started_at_next_claim: list[bool] = []
        self.next_claim = asyncio.Event()

    async def claim_due(self, *args: Any, **kwargs: Any) -> Any:
        if self.claimed:
            self.handler_started_at_next_claim.append(self.started.is_set())
            self.next_claim.set()
        claims = await super().claim_due(*args, **kwargs)
        self.claimed = self.claimed or bool(claims)
        return claims


async def test_the_handler_of_a_claimed_task_starts_before_the_next_claim_is_sent(
    queue: str,
) -> None:
    app = rdq.App()
    app.queue(queue, concurrency=10)
    started = asyncio.Event()
    finish = asyncio.Event()

    @app.handler("job", queue=queue)
    async def job(payload: object) -> None:
        started.set()
        await finish.wait()

    async with MemoryStorage() as inner:
        await rdq.Client(inner, app).submit("job")
        store = ClaimsSeen(inner, started)
        async with running(fast_worker(app, store)):  # type: ignore[arg-type]
            await asyncio.wait_for(started.wait(), 10)
            await asyncio.wait_for(store.next_claim.wait(), 10)  # the claim for the free slots
            finish.set()
    assert store.handler_started_at_next_claim[0] is True
