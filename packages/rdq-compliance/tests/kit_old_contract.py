"""Backends written for contract version 1, the first published contract, as a third party
wrote them then: one on ``StorageBase`` (which was not yet a template: the store overrides
the public operations and opens itself in ``connect``), one implementing the bare protocol.

Neither has an operation added since (``now``, ``list_tasks``, ``cancel``, ``list_queues``,
``import_tasks``, the audit trail, ``dlq_groups``), nor takes ``worker_id`` in ``claim_due``;
``migrate`` returns ``None``; the capabilities are version 1's. Underneath, each keeps its
tasks in the reference memory store, reached only through version-1 operations.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Self

from rdq.errors import NotFound, StaleClaim
from rdq.spi import (
    Attempt,
    Capabilities,
    Claimed,
    Completion,
    DLQFilter,
    Envelope,
    Page,
    Selector,
    Stats,
    StorageBase,
)
from rdq_memory import MemoryStorage

VERSION_1_CAPABILITIES = Capabilities(
    notify=True, filter_pushdown=True, batch_enqueue=True, batch_complete=True
)


class _VersionOneOperations:
    """The operations of contract version 1, each one call of the memory store."""

    _tasks: MemoryStorage

    async def migrate(self) -> None:
        return None

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        return await self._tasks.enqueue(task, delay=delay)

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        return await self._tasks.enqueue_batch(tasks, delay=delay)

    async def claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claimed]:
        return await self._tasks.claim_due(queue, limit, lease)

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        return await self._tasks.extend_lease(task_id, token, lease)

    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        await self._tasks.reschedule(task_id, token, attempt, next_at)

    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._tasks.complete(task_id, token, attempt)

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        return await self._tasks.complete_many(completions)

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._tasks.dead_letter(task_id, token, attempt)

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return await self._tasks.dlq_list(queue, dlq_filter, page)

    async def get(self, task_id: str) -> Envelope:
        return await self._tasks.get(task_id)

    async def redrive(self, queue: str, selector: Selector) -> int:
        return await self._tasks.redrive(queue, selector)

    async def purge(self, queue: str, selector: Selector) -> int:
        return await self._tasks.purge(queue, selector)

    async def stats(self, queue: str) -> Stats:
        return await self._tasks.stats(queue)

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        return await self._tasks.purge_succeeded(queue, older_than)

    async def wait_due(self, queue: str, timeout: float) -> bool:
        return await self._tasks.wait_due(queue, timeout)

    def capabilities(self) -> Capabilities:
        return VERSION_1_CAPABILITIES


class VersionOneStore(_VersionOneOperations, StorageBase):
    """On ``StorageBase``, as the version-1 guide showed."""

    def __init__(self) -> None:
        self._tasks = MemoryStorage()

    async def connect(self) -> None:
        await self._tasks.connect()

    async def aclose(self) -> None:
        await self._tasks.aclose()


class BareVersionOneStore(_VersionOneOperations):
    """The bare protocol of version 1: no base class at all."""

    def __init__(self) -> None:
        self._tasks = MemoryStorage()

    async def connect(self) -> None:
        await self._tasks.connect()

    async def aclose(self) -> None:
        await self._tasks.aclose()

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
