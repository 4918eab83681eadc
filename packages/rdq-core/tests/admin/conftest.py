"""Fixtures for the DLQ admin tests: an in-memory store with and without filter pushdown."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
import pytest_asyncio

from rdq.spi import (
    Attempt,
    Capabilities,
    DLQFilter,
    Envelope,
    Outcome,
    Page,
    Storage,
    StorageBase,
    TaskFilter,
)
from rdq_memory import MemoryStorage


class NoPushdownStorage(MemoryStorage):
    """The memory store as a backend without ``filter_pushdown``: it ignores DLQ filters in
    listing *and* in redrive/purge (the worst case the contract allows)."""

    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(
            super().capabilities(),
            notify=False,
            filter_pushdown=False,
            batch_enqueue=False,
            group_pushdown=False,
        )

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return await super().dlq_list(queue, None, page)

    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return await super().list_tasks(queue, TaskFilter(status=task_filter.status), page)

    _dlq_groups = StorageBase._dlq_groups  # the default: paging through dlq_list

    async def redrive(self, queue: str, selector: Any) -> int:
        if selector.filter is not None:
            raise AssertionError("a store without filter_pushdown got a redrive by filter")
        return await super().redrive(queue, selector)

    async def purge(self, queue: str, selector: Any) -> int:
        if selector.filter is not None:
            raise AssertionError("a store without filter_pushdown got a purge by filter")
        return await super().purge(queue, selector)


@pytest_asyncio.fixture(params=["pushdown", "no-pushdown"])
async def storage(request: pytest.FixtureRequest) -> AsyncIterator[Storage]:
    store = MemoryStorage() if request.param == "pushdown" else NoPushdownStorage()
    async with store:
        yield store


DeadLetter = Callable[..., Awaitable[Envelope]]


@pytest.fixture
def dead_letter() -> DeadLetter:
    """``await dead_letter(storage, task_id, queue=, handler_ref=, error_type=)``."""
    return _dead_letter


async def _dead_letter(
    storage: Storage,
    task_id: str,
    *,
    queue: str = "q",
    handler_ref: str = "h",
    error_type: str = "Boom",
) -> Envelope:
    """Enqueue ``task_id`` and dead-letter it at once with ``error_type``."""
    await storage.enqueue(Envelope(id=task_id, queue=queue, handler_ref=handler_ref))
    claimed = await storage.claim_due(queue, 1000, timedelta(seconds=30))
    now = datetime.now(UTC)
    for claim in claimed:
        if claim.task.id == task_id:
            attempt = Attempt(
                number=claim.task.attempt_count + 1,
                outcome=Outcome.PERMANENT,
                error_type=error_type,
                error_message="failed",
                started_at=now,
                finished_at=now,
                worker_id="test",
            )
            await storage.dead_letter(task_id, claim.token, attempt)
        else:
            raise AssertionError(f"unexpected claim {claim.task.id}")
    return await storage.get(task_id)
