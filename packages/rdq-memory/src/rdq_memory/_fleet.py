"""Flow control, the worker registry and the counts of the memory store (contract versions 3
and 4): each operation one call of :mod:`rdq_memory._flow` under the state's lock.

Kept out of ``_store``, as in the other backends, so that it stays the operations every
backend has.
"""

from __future__ import annotations

from datetime import datetime

from rdq.spi import Control, Counts, WorkerInfo
from rdq_memory import _flow
from rdq_memory._core import MemoryCore

__all__ = ["FleetOperations"]


class FleetOperations(MemoryCore):
    """Controls, ``retry_now``, the worker registry and the counts (see the module
    docstring)."""

    async def _list_controls(self, queue: str | None) -> list[Control]:
        with self._state.lock:
            return _flow.list_controls(self._state, queue, self._clock_now())

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        with self._state.lock:
            stored = _flow.put_control(self._state, control, expected_version, self._clock_now())
            self._state.wake(control.queue)  # a control lifted may make tasks claimable
            return stored

    async def _delete_control(self, queue: str, key: str, expected_version: int) -> bool:
        with self._state.lock:
            deleted = _flow.delete_control(self._state, queue, key, expected_version)
            self._state.wake(queue)
            return deleted

    async def _retry_now(self, queue: str, task_ids: list[str]) -> int:
        with self._state.lock:
            return _flow.retry_now(self._state, queue, task_ids, self._clock_now())

    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        with self._state.lock:
            return _flow.heartbeat(self._state, info, self._clock_now())

    async def _list_workers(self) -> list[WorkerInfo]:
        with self._state.lock:
            return [self._state.workers[i] for i in sorted(self._state.workers)]

    async def _remove_worker(self, worker_id: str) -> bool:
        with self._state.lock:
            return self._state.workers.pop(worker_id, None) is not None

    async def _purge_workers(self, seen_before: datetime) -> int:
        with self._state.lock:
            return _flow.purge_workers(self._state, seen_before)

    async def _add_counts(self, counts: list[Counts]) -> None:
        with self._state.lock:
            _flow.add_counts(self._state, counts)

    async def _read_counts(self, queue: str | None, since: datetime) -> list[Counts]:
        with self._state.lock:
            return _flow.read_counts(self._state, queue, since)

    async def _purge_counts(self, before: datetime) -> int:
        with self._state.lock:
            return _flow.purge_counts(self._state, before)
