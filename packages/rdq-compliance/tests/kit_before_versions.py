"""A backend written before the contract had versions, as a third party wrote one from the
guide of that time (docs/writing-a-backend.md at 82c19ed): a plugin module that registers its
scheme with ``rdq_register_storage``, a store on ``StorageBase`` that overrides the public
operations (the base was not a template yet: it gave the context manager and no-op
``connect``/``aclose``/``migrate``), checks its arguments with ``rdq.spi.limits`` at the top of
each, and clears on ``enqueue`` the store-owned fields that version 1 had. It states no
contract version and advertises version 1's capabilities.

Its tasks live in an SQLite file (``beforeversions:///PATH`` opens ``sqlite:///PATH``), reached
through the public operations of version 1 — and ``import_tasks`` to store an admitted
envelope as the store itself built it — so that other processes (the chaos test's workers)
open the same data by URL. ``test_kit_keeps_old_backends`` runs the kit against it with the
guide's test class of that time: ``storage_url`` and ``storage``, nothing more.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec

from rdq import open_storage
from rdq.errors import ConfigError
from rdq.plugins import StorageRegistry, hookimpl
from rdq.spi import (
    Attempt,
    Capabilities,
    Claimed,
    DLQFilter,
    Envelope,
    Page,
    Selector,
    Stats,
    Status,
    Storage,
    StorageBase,
    limits,
)

SCHEME = "beforeversions"

CAPABILITIES = Capabilities(notify=True, filter_pushdown=True, batch_enqueue=True)


class BeforeVersionsStore(StorageBase):
    """The store, as the guide of that time showed it: every operation overridden."""

    def __init__(self, url: str) -> None:
        path = url.split("://", 1)[1]
        self._tasks = open_storage(f"sqlite://{path}")

    @classmethod
    def from_url(cls, url: str, **options: Any) -> BeforeVersionsStore:
        if options:
            raise ConfigError(f"unknown options {sorted(options)}", key=sorted(options)[0])
        return cls(url)

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    async def connect(self) -> None:
        await self._tasks.connect()

    async def aclose(self) -> None:
        await self._tasks.aclose()

    async def migrate(self) -> None:
        await self._tasks.migrate()

    async def _admitted(self, task: Envelope, delay: timedelta | None) -> Envelope:
        """The task as this store admits it: PENDING, created now, due as asked, without
        the fields version 1 said the store owns (it knows of no others)."""
        limits.check_task(task)
        now = await self._tasks.now()
        return msgspec.structs.replace(
            task,
            status=Status.PENDING,
            created_at=now,
            next_attempt_at=task.next_attempt_at or now + (delay or timedelta(0)),
            lease_expires_at=None,
            completed_at=None,
            dead_lettered_at=None,
        )

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        return (await self._tasks.import_tasks([await self._admitted(task, delay)]))[0]

    async def enqueue_batch(
        self, tasks: list[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        admitted = [await self._admitted(task, delay) for task in tasks]
        return await self._tasks.import_tasks(admitted) if admitted else []

    async def claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claimed]:
        limits.check_queue(queue)
        limits.check_limit(limit)
        limits.check_lease(lease)
        return await self._tasks.claim_due(queue, limit, lease)

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        return await self._tasks.extend_lease(task_id, token, lease)

    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        await self._tasks.reschedule(task_id, token, attempt, next_at)

    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._tasks.complete(task_id, token, attempt)

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


def open_before_versions(url: str, **options: Any) -> Storage:
    return BeforeVersionsStore.from_url(url, **options)


@hookimpl
def rdq_register_storage(registry: StorageRegistry) -> None:
    registry.add(SCHEME, open_before_versions)
