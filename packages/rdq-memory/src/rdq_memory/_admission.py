"""Admission in the memory store (``enqueue``, ``enqueue_batch``, ``import_tasks``): new tasks
copied in under the state's lock, idempotent by id, ``IDConflict`` for an id another queue
holds (:meth:`~rdq_memory._state.MemoryState.admissible`), waiters of the queues that gained a
task woken.
"""

from __future__ import annotations

from datetime import timedelta

from rdq.spi import Envelope, Status
from rdq_memory._codec import copy_in
from rdq_memory._core import MemoryCore
from rdq_memory._state import Record

__all__ = ["AdmissionOperations"]


class AdmissionOperations(MemoryCore):
    """``_enqueue``, ``_enqueue_batch`` and ``_import_tasks`` (see the module docstring)."""

    async def _enqueue(self, task: Envelope, delay: timedelta | None) -> bool:
        return (await self._enqueue_batch([task], delay))[0]

    async def _enqueue_batch(self, tasks: list[Envelope], delay: timedelta | None) -> list[bool]:
        copies = [copy_in(task) for task in tasks]
        state = self._state
        with state.lock:
            now = self._clock_now()
            stored = state.admissible(copies)
            for task, new in zip(copies, stored, strict=True):
                if not new:
                    continue
                task.status = Status.PENDING
                task.created_at = now
                if task.next_attempt_at is None:
                    task.next_attempt_at = now + (delay or timedelta(0))
                for owned in _OWNED_AFTER_ADMISSION:
                    setattr(task, owned, None)
                state.add(Record(task))
            for queue in {t.queue for t, new in zip(copies, stored, strict=True) if new}:
                state.wake(queue)
            return stored

    async def _import_tasks(self, tasks: list[Envelope]) -> list[bool]:
        copies = [copy_in(task) for task in tasks]
        state = self._state
        with state.lock:
            stored = state.admissible(copies)
            for task, new in zip(copies, stored, strict=True):
                if new:
                    state.add(Record(task))
                    state.wake(task.queue)
            return stored


_OWNED_AFTER_ADMISSION = (
    "lease_expires_at",
    "claimed_by",
    "claimed_at",
    "completed_at",
    "dead_lettered_at",
    "cancelled_at",
)
"""Store-owned fields an admitted task starts without."""
