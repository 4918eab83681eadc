"""The operations of contract versions 3 and 4 in :class:`~rdq.spi.StorageBase`: flow control
(controls and ``retry_now``), the worker registry and the counters.

Each is the same template as the rest of the base (check open, validate through
:mod:`rdq.spi.bounds`, call the store's ``_operation`` within the operation timeout); the
defaults raise :class:`~rdq.errors.Unsupported` naming the capability. They live apart from
the version-1 operations because they are one concern (what the fleet and its controls
store) that a store adopts as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rdq.errors import ValidationError
from rdq.spi import bounds
from rdq.spi._flow import Control, Counts, WorkerInfo
from rdq.spi._lifecycle import StoreLifecycle

__all__ = ["FlowOperations"]


class FlowOperations(StoreLifecycle):
    """Controls, ``retry_now``, the worker registry and the counters (see the module
    docstring); stores subclass :class:`~rdq.spi.StorageBase`, which inherits these."""

    # --- flow control (contract version 3) --------------------------------------------------

    async def list_controls(self, queue: str | None = None) -> list[Control]:
        self._check_open()
        if queue is not None:
            bounds.check_queue(queue)
        return await self._run(self._list_controls(queue))

    async def put_control(self, control: Control, *, expected_version: int) -> Control:
        self._check_open()
        bounds.check_control(control)
        bounds.check_version(expected_version)
        capabilities = self.capabilities()
        if control.fair is not None and not capabilities.fair_shares:
            raise self._unsupported("fair_shares")
        if control.aging is not None and not capabilities.priority_aging:
            raise self._unsupported("priority_aging")
        return await self._run(self._put_control(control, expected_version))

    async def delete_control(self, queue: str, key: str, *, expected_version: int) -> bool:
        self._check_open()
        bounds.check_queue(queue)
        bounds.check_control_key(key)
        bounds.check_version(expected_version)
        return await self._run(self._delete_control(queue, key, expected_version))

    async def retry_now(self, queue: str, task_ids: Sequence[str]) -> int:
        self._check_open()
        bounds.check_queue(queue)
        ids = list(dict.fromkeys(bounds.check_ids(task_ids)))
        if not ids:
            return 0
        return await self._run(self._retry_now(queue, ids))

    async def _list_controls(self, queue: str | None) -> list[Control]:
        raise self._unsupported("control")

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        raise self._unsupported("control")

    async def _delete_control(self, queue: str, key: str, expected_version: int) -> bool:
        raise self._unsupported("control")

    async def _retry_now(self, queue: str, task_ids: list[str]) -> int:
        """``task_ids``: valid, each once."""
        raise self._unsupported("control")

    # --- the fleet (contract version 3) -------------------------------------------------------

    async def heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        self._check_open()
        bounds.check_worker_info(info)
        return await self._run(self._heartbeat_worker(info))

    async def list_workers(self) -> list[WorkerInfo]:
        self._check_open()
        return await self._run(self._list_workers())

    async def remove_worker(self, worker_id: str) -> bool:
        self._check_open()
        if bounds.check_worker_id(worker_id) is None:
            raise ValidationError("must be a worker id", field="worker_id")
        return await self._run(self._remove_worker(worker_id))

    async def purge_workers(self, seen_before: datetime) -> int:
        self._check_open()
        bounds.check_aware(seen_before, "seen_before")
        return await self._run(self._purge_workers(seen_before))

    async def add_counts(self, counts: Sequence[Counts]) -> None:
        self._check_open()
        checked = bounds.check_counts(counts)
        if checked:
            await self._run(self._add_counts(checked))

    async def read_counts(self, queue: str | None, since: datetime) -> list[Counts]:
        self._check_open()
        if queue is not None:
            bounds.check_queue(queue)
        bounds.check_aware(since, "since")
        return await self._run(self._read_counts(queue, since))

    async def purge_counts(self, before: datetime) -> int:
        self._check_open()
        bounds.check_aware(before, "before")
        return await self._run(self._purge_counts(before))

    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        raise self._unsupported("worker_registry")

    async def _list_workers(self) -> list[WorkerInfo]:
        raise self._unsupported("worker_registry")

    async def _remove_worker(self, worker_id: str) -> bool:
        raise self._unsupported("worker_registry")

    async def _purge_workers(self, seen_before: datetime) -> int:
        raise self._unsupported("worker_registry")

    async def _add_counts(self, counts: list[Counts]) -> None:
        raise self._unsupported("counters")

    async def _read_counts(self, queue: str | None, since: datetime) -> list[Counts]:
        raise self._unsupported("counters")

    async def _purge_counts(self, before: datetime) -> int:
        raise self._unsupported("counters")
