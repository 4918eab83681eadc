"""The operations of contract version 5 in :class:`~rdq.spi.StorageBase`: what a store keeps
and for how long — the retention step (``expire_tasks``), admission under a dedup key
(``admit``) and the payload references tasks hold (``held_payload_refs``).

The same template as the rest of the base (check open, validate through
:mod:`rdq.spi.bounds`, call the store's ``_operation`` within the operation timeout). They
live apart from the older operations because they are one concern — a task's lifetime in the
store — that a store adopts as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from rdq.spi import bounds, defaults
from rdq.spi._flow_operations import FlowOperations
from rdq.spi._models import Admitted, Dedup, Envelope

__all__ = ["KeepingOperations"]


class KeepingOperations(FlowOperations):
    """``expire_tasks``, ``admit`` and ``held_payload_refs`` (see the module docstring); stores
    subclass
    :class:`~rdq.spi.StorageBase`, which inherits them."""

    async def held_payload_refs(self, refs: Sequence[str]) -> set[str]:
        self._check_open()
        checked = list(dict.fromkeys(bounds.check_payload_refs(refs)))
        if not checked:
            return set()
        return await self._run(self._held_payload_refs(checked))

    async def _held_payload_refs(self, refs: list[str]) -> set[str]:
        """``refs``: valid, each once, at least one."""
        raise self._unsupported("payload_refs")

    async def admit(
        self, task: Envelope, dedup: Dedup, *, delay: timedelta | None = None
    ) -> Admitted:
        self._check_open()
        bounds.check_task(task)
        bounds.check_dedup(dedup)
        bounds.check_delay(delay)
        return await self._run(self._admit(task, dedup, delay))

    async def _admit(self, task: Envelope, dedup: Dedup, delay: timedelta | None) -> Admitted:
        raise self._unsupported("dedup")

    async def expire_tasks(self, queue: str, task_ids: Sequence[str], before: datetime) -> int:
        self._check_open()
        bounds.check_queue(queue)
        ids = list(dict.fromkeys(bounds.check_ids(task_ids)))
        bounds.check_aware(before, "before")
        if not ids:
            return 0
        return await self._run(self._expire_tasks(queue, ids, before))

    async def _expire_tasks(self, queue: str, task_ids: list[str], before: datetime) -> int:
        """``task_ids``: valid, each once. By default built on ``get``, ``purge`` and
        ``purge_succeeded`` (:func:`rdq.spi.defaults.expire_by_purge`); override it with one
        atomic deletion per task and advertise ``retention``."""
        return await defaults.expire_by_purge(self, queue, task_ids, before)  # type: ignore[arg-type]
