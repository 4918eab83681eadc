"""Broken stores for the clauses of contract version 5's retention (``expire_tasks``).

Like ``kit_broken_stores``: each is a small subclass of the reference memory store that
breaks exactly one promise; ``BROKEN_STORES`` maps it to the kit tests that must fail.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from kit_broken_stores import _Broken
from rdq.spi import Envelope, Status, status_time

_FINISHED = (Status.DEAD, Status.SUCCEEDED, Status.CANCELLED)


class ExpiresByTimeAlone(_Broken):
    """Deletes every finished task of the queue before the cut-off, listed or not (what
    ``purge_succeeded`` with the cut-off would do)."""

    async def _expire_tasks(self, queue: str, task_ids: list[str], before: datetime) -> int:
        with self._state.lock:
            everyone = [r.task.id for r in self._state.of_queue(queue)]
        return await super()._expire_tasks(queue, everyone, before)


class ExpiresLiveTasksToo(_Broken):
    """Deletes the listed tasks of the queue whatever their status."""

    async def _expire_tasks(self, queue: str, task_ids: list[str], before: datetime) -> int:
        state = self._state
        with state.lock:
            doomed = [
                r
                for i in task_ids
                if (r := state.tasks.get(i)) is not None and r.task.queue == queue
            ]
            for record in doomed:
                state.delete(record)
            return len(doomed)


class ExpiresWhateverItsTime(_Broken):
    """Ignores the cut-off: a task finished after it (redriven and dead again) goes too."""

    async def _expire_tasks(self, queue: str, task_ids: list[str], before: datetime) -> int:
        return await super()._expire_tasks(
            queue, task_ids, datetime.max.replace(tzinfo=before.tzinfo)
        )


class ExpiresOnlyFromTheIndex(_Broken):
    """Takes the tasks out of the DLQ index and the counts, but keeps the records: ``get``
    still finds them and their ids stay taken."""

    async def _expire_tasks(self, queue: str, task_ids: list[str], before: datetime) -> int:
        state = self._state
        expired = 0
        with state.lock:
            for task_id in task_ids:
                record = state.tasks.get(task_id)
                if record is None or record.task.queue != queue:
                    continue
                at = status_time(record.task)
                if record.task.status in _FINISHED and at is not None and at < before:
                    state.remove_dead(record.task)
                    state.index(queue).ids.discard(task_id)
                    expired += 1
        return expired


class ExpiresButRemembersTheIds(_Broken):
    """Deletes the tasks but keeps their ids taken: admitting one again is refused as a
    duplicate, and an import of the archived task stores nothing."""

    _gone: set[str]

    async def _expire_tasks(self, queue: str, task_ids: list[str], before: datetime) -> int:
        with self._state.lock:
            present = {i for i in task_ids if i in self._state.tasks}
            expired = await super()._expire_tasks(queue, task_ids, before)
            self._tombstones().update(i for i in present if i not in self._state.tasks)
        return expired

    def _tombstones(self) -> set[str]:
        if not hasattr(self, "_gone"):
            self._gone = set()
        return self._gone

    async def _enqueue_batch(self, tasks: list[Envelope], delay: timedelta | None) -> list[bool]:
        gone = self._tombstones()
        fresh = [t for t in tasks if t.id not in gone]
        flags = iter(await super()._enqueue_batch(fresh, delay) if fresh else [])
        return [False if t.id in gone else next(flags) for t in tasks]

    async def _import_tasks(self, tasks: list[Envelope]) -> list[bool]:
        gone = self._tombstones()
        fresh = [t for t in tasks if t.id not in gone]
        flags = iter(await super()._import_tasks(fresh) if fresh else [])
        return [False if t.id in gone else next(flags) for t in tasks]


class ExpiresWithoutCheckingItsInput(_Broken):
    """Deletes before it validates (a naive cut-off is read as UTC)."""

    async def expire_tasks(self, queue: str, task_ids: list[str], before: datetime) -> int:  # type: ignore[override]
        if before.tzinfo is None:
            from datetime import UTC

            before = before.replace(tzinfo=UTC)
        return await self._expire_tasks(queue, list(task_ids), before)


BROKEN_STORES: dict[type, list[str]] = {
    ExpiresByTimeAlone: ["test_expire_tasks_deletes_only_the_ids_it_is_given"],
    ExpiresLiveTasksToo: ["test_expire_tasks_leaves_live_tasks_other_queues_and_unknown_ids_alone"],
    ExpiresWhateverItsTime: [
        "test_expire_tasks_leaves_tasks_finished_at_or_after_the_cutoff",
        "test_a_task_redriven_and_dead_lettered_again_since_it_was_read_is_not_expired",
    ],
    ExpiresOnlyFromTheIndex: [
        "test_expire_tasks_deletes_the_listed_finished_tasks_before_the_cutoff",
        "test_an_expired_id_can_be_admitted_again",
    ],
    ExpiresButRemembersTheIds: [
        "test_an_expired_id_can_be_admitted_again",
        "test_an_expired_task_imported_again_is_back_in_the_dlq_as_it_was",
    ],
    ExpiresWithoutCheckingItsInput: [
        "test_expire_tasks_with_bad_input_raises_validation_error_and_deletes_nothing"
    ],
}
