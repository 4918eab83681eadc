"""Admission in the memory store (``enqueue``, ``enqueue_batch``, ``import_tasks``, and
``admit`` under a dedup key): new tasks copied in under the state's lock, idempotent by id,
``IDConflict`` for an id another queue holds
(:meth:`~rdq_memory._state.MemoryState.admissible`), waiters of the queues that gained a task
woken. ``admit`` decides on the key and acts in the same hold of the lock, so of concurrent
admissions of one key exactly one adds a task.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec

from rdq.errors import DedupConflict
from rdq.spi import AdmitOutcome, Admitted, Dedup, DedupMode, Envelope, Status
from rdq_memory._codec import copy_in
from rdq_memory._core import MemoryCore
from rdq_memory._state import DedupHold, MemoryState, Record

__all__ = ["AdmissionOperations"]


class AdmissionOperations(MemoryCore):
    """``_enqueue``, ``_enqueue_batch``, ``_import_tasks`` and ``_admit`` (see the module
    docstring)."""

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

    async def _admit(self, task: Envelope, dedup: Dedup, delay: timedelta | None) -> Admitted:
        state = self._state
        with state.lock:
            now = self._clock_now()
            [new] = state.admissible([task])  # IDConflict for an id of another queue
            if not new:
                return Admitted(outcome=AdmitOutcome.SKIPPED, task_id=task.id, queue=task.queue)
            hold = state.dedup.get(dedup.key)
            holder = _holder(state, hold, now)
            if hold is None or holder is None:
                await self._enqueue_batch([task], delay)
                until = now + timedelta(seconds=dedup.window) if dedup.window else None
                state.dedup[dedup.key] = DedupHold(task.id, task.queue, until)
                state.dedup_of[task.id] = dedup.key
                return Admitted(outcome=AdmitOutcome.ADDED, task_id=task.id, queue=task.queue)
            if hold.queue != task.queue:
                raise DedupConflict(dedup.key, hold.queue, hold.task_id)
            held = Admitted(outcome=AdmitOutcome.SKIPPED, task_id=hold.task_id, queue=hold.queue)
            if dedup.mode == DedupMode.EXTEND and dedup.window:
                hold.until = now + timedelta(seconds=dedup.window)
                return msgspec.structs.replace(held, outcome=AdmitOutcome.EXTENDED)
            if dedup.mode in (DedupMode.REPLACE, DedupMode.DEBOUNCE):
                if holder.task.status != Status.PENDING:
                    return held
                holder.task.payload = copy_in(task).payload
                holder.task.headers = dict(task.headers)
                if dedup.mode == DedupMode.DEBOUNCE:
                    wanted = task.next_attempt_at or now + (delay or timedelta(0))
                    latest = (holder.task.created_at or now) + timedelta(seconds=dedup.max_age or 0)
                    holder.task.next_attempt_at = max(now, min(wanted, latest))
                    holder.bump()
                    state.schedule(holder)
                    state.wake(task.queue)
                    if dedup.window:
                        hold.until = now + timedelta(seconds=dedup.window)
                return msgspec.structs.replace(held, outcome=AdmitOutcome.REPLACED)
            return held

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


def _holder(state: MemoryState, hold: DedupHold | None, now: datetime) -> Record | None:
    """The record of the task that holds a key now (``None``: the key is free)."""
    if hold is None:
        return None
    record = state.tasks.get(hold.task_id)
    if record is None:
        return None
    if hold.until is not None:
        return record if hold.until > now else None
    return record if record.task.status in (Status.PENDING, Status.IN_FLIGHT) else None


_OWNED_AFTER_ADMISSION = (
    "lease_expires_at",
    "claimed_by",
    "claimed_at",
    "completed_at",
    "dead_lettered_at",
    "cancelled_at",
)
"""Store-owned fields an admitted task starts without."""
