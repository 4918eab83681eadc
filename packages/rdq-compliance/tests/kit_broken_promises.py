"""Broken stores for promises that every earlier broken store let through: each passed the
whole kit before its clause was written. Like ``kit_broken_stores``: a small subclass of the
reference memory store breaking one promise; ``BROKEN_STORES`` maps it to the kit tests that
must fail against it."""

from __future__ import annotations

from datetime import timedelta

import msgspec

from kit_broken_stores import _Broken
from rdq.spi import AuditEntry, DLQGroup, Envelope, Page, Stats, Status, TaskFilter, group_order


class ListsOnlyLiveLeases(_Broken):
    """Leaves out of IN_FLIGHT listings the tasks whose lease lapsed (not yet reclaimed)."""

    async def _list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        tasks, cursor = await super()._list_tasks(queue, task_filter, page)
        if task_filter.status is not Status.IN_FLIGHT:
            return tasks, cursor
        now = self._clock_now()
        live = [t for t in tasks if t.lease_expires_at is not None and t.lease_expires_at > now]
        return live, cursor


class GroupsByMessageToo(_Broken):
    """Keys DLQ groups by the last attempt's message as well."""

    async def _dlq_groups(self, queue: str) -> list[DLQGroup]:
        groups: dict[tuple[str, str | None, str | None], list[Envelope]] = {}
        with self._state.lock:
            for _, task_id in self._state.index(queue).dlq:
                task = self._state.tasks[task_id].task
                last = task.attempts[-1] if task.attempts else None
                key = (task.handler_ref, last and last.error_type, last and last.error_message)
                groups.setdefault(key, []).append(task)
        out = [
            DLQGroup(
                handler_ref=handler_ref,
                error_type=error_type,
                count=len(tasks),
                first_dead_lettered_at=min(t.dead_lettered_at for t in tasks if t.dead_lettered_at),
                last_dead_lettered_at=max(t.dead_lettered_at for t in tasks if t.dead_lettered_at),
            )
            for (handler_ref, error_type, _), tasks in groups.items()
        ]
        return sorted(out, key=group_order)


class ListQueuesSkipsFinishedQueues(_Broken):
    """Lists only queues with PENDING, IN_FLIGHT or DEAD tasks."""

    async def _list_queues(self) -> list[Stats]:
        return [s for s in await super()._list_queues() if s.pending or s.in_flight or s.dlq_depth]


class AuditKeepsTheCallersIdAndTime(_Broken):
    """Stores an entry's own id and time when it carries them."""

    async def _append_audit(self, entry: AuditEntry) -> AuditEntry:
        stored = await super()._append_audit(entry)
        if entry.id is None and entry.time is None:
            return stored
        kept = msgspec.structs.replace(
            stored, id=entry.id or stored.id, time=entry.time or stored.time
        )
        with self._state.lock:
            self._state.audit[-1] = kept
        return kept


class ClampsAPastNextAttemptAt(_Broken):
    """Makes a task given a due time in the past due now instead."""

    async def _enqueue_batch(self, tasks: list[Envelope], delay: timedelta | None) -> list[bool]:
        now = self._clock_now()
        clamped = [
            msgspec.structs.replace(t, next_attempt_at=now)
            if t.next_attempt_at is not None and t.next_attempt_at < now
            else t
            for t in tasks
        ]
        return await super()._enqueue_batch(clamped, delay)


BROKEN_STORES: dict[type, list[str]] = {
    ListsOnlyLiveLeases: [
        "test_list_tasks_lists_an_in_flight_task_whose_lease_lapsed_until_it_is_reclaimed"
    ],
    GroupsByMessageToo: [
        "test_dlq_groups_put_one_handler_and_error_type_in_one_group_whatever_the_messages"
    ],
    ListQueuesSkipsFinishedQueues: [
        "test_list_queues_lists_a_queue_that_holds_only_finished_tasks"
    ],
    AuditKeepsTheCallersIdAndTime: [
        "test_append_audit_stamps_its_own_time_and_a_fresh_id_whatever_the_entry_carries"
    ],
    ClampsAPastNextAttemptAt: ["test_enqueue_keeps_a_given_next_attempt_at[past]"],
}
"""Each broken store and the kit tests that must fail against it."""
