"""What leaves the memory store: ``expire_tasks``, the retention step (the engine archived the
tasks it names), deleting each listed finished task whose status time is before the cut-off,
under the state's lock; and what the tasks left still refer to, ``held_payload_refs`` (the
reference store reads every task's headers: no index to keep right).
"""

from __future__ import annotations

from datetime import datetime

from rdq.spi import PAYLOAD_REF_HEADER, Status, status_time
from rdq_memory._core import MemoryCore

__all__ = ["RetentionOperations"]

FINISHED = (Status.DEAD, Status.SUCCEEDED, Status.CANCELLED)


class RetentionOperations(MemoryCore):
    """``_expire_tasks`` and ``_held_payload_refs`` (see the module docstring)."""

    async def _held_payload_refs(self, refs: list[str]) -> set[str]:
        wanted = set(refs)
        with self._state.lock:
            return {
                ref
                for record in self._state.tasks.values()
                if (ref := record.task.headers.get(PAYLOAD_REF_HEADER)) in wanted
            }

    async def _expire_tasks(self, queue: str, task_ids: list[str], before: datetime) -> int:
        state = self._state
        with state.lock:
            expired = 0
            for task_id in task_ids:
                record = state.tasks.get(task_id)
                if record is None or record.task.queue != queue:
                    continue
                if record.task.status not in FINISHED:
                    continue
                at = status_time(record.task)
                if at is None or at >= before:
                    continue
                state.delete(record)
                expired += 1
            return expired
