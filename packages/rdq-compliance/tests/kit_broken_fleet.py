"""Broken stores for what contract version 3 promises of ``retry_now`` beyond waiting tasks,
of the worker registry beyond one heartbeat per worker and of the counts beyond one addition
to each: like ``kit_broken_flow``, each a small subclass of the reference memory store that
breaks one promise, and each passes the clauses the kit had before. ``BROKEN_STORES`` maps it
to the kit tests that must fail against it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

import msgspec

from kit_broken_stores import STATEFUL, _Broken
from rdq.spi import Counts, Status, WorkerInfo

# --- retry now ----------------------------------------------------------------------------------


class RetryNowMovesDueTasksToNow(_Broken):
    """Sets every listed PENDING task due now, the ones due since earlier too (it counts only
    those that were waiting)."""

    async def _retry_now(self, queue: str, task_ids: list[str]) -> int:
        with self._state.lock:
            now = self._clock_now()
            early = [
                record
                for record in (self._state.tasks.get(i) for i in task_ids)
                if record is not None
                and record.task.queue == queue
                and record.task.status == Status.PENDING
                and record.task.next_attempt_at is not None
                and record.task.next_attempt_at < now
            ]
            for record in early:
                record.task.next_attempt_at = now
                record.bump()
                self._state.schedule(record)
        return await super()._retry_now(queue, task_ids)


class RetryNowRevivesDeadTasks(_Broken):
    """Takes "retry now" for a redrive of a DEAD task: due now, its attempts kept."""

    async def _retry_now(self, queue: str, task_ids: list[str]) -> int:
        moved = await super()._retry_now(queue, task_ids)
        state = self._state
        with state.lock:
            now = self._clock_now()
            for task_id in task_ids:
                record = state.tasks.get(task_id)
                if record is None or record.task.queue != queue:
                    continue
                if record.task.status == Status.DEAD:
                    state.remove_dead(record.task)
                    record.task.status = Status.PENDING
                    record.task.dead_lettered_at = None
                    record.task.next_attempt_at = now
                    record.bump()
                    state.schedule(record)
                    moved += 1
        return moved


class RetryNowResetsThePriority(_Broken):
    async def _retry_now(self, queue: str, task_ids: list[str]) -> int:
        state = self._state
        with state.lock:
            now = self._clock_now()
            for task_id in task_ids:
                record = state.tasks.get(task_id)
                due = record.task.next_attempt_at if record is not None else None
                if record is None or record.task.status != Status.PENDING:
                    continue
                if record.task.queue == queue and due is not None and due > now:
                    record.task.priority = 0
        return await super()._retry_now(queue, task_ids)


# --- the worker registry ------------------------------------------------------------------------


class PurgesWorkersByTheirStart(_Broken):
    async def _purge_workers(self, seen_before: datetime) -> int:
        with self._state.lock:
            workers = self._state.workers
            doomed = [
                i
                for i, w in workers.items()
                if w.started_at is not None and w.started_at < seen_before
            ]
            for worker_id in doomed:
                del workers[worker_id]
            return len(doomed)


class KeepsTheStartAHeartbeatSends(_Broken):
    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        stored = await super()._heartbeat_worker(info)
        if info.started_at is None:
            return stored
        kept = msgspec.structs.replace(stored, started_at=info.started_at)
        with self._state.lock:
            self._state.workers[info.id] = kept
        return kept


class KeysTheStartByHost(_Broken):
    """Keeps when a worker started per host (one start for the workers of one host)."""

    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        stored = await super()._heartbeat_worker(info)
        starts = self._state.__dict__.setdefault("kit_starts", {})
        started = starts.setdefault(info.host, stored.started_at)
        kept = msgspec.structs.replace(stored, started_at=started)
        with self._state.lock:
            self._state.workers[info.id] = kept
        return kept


class RemembersTheStartOfARemovedWorker(_Broken):
    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        stored = await super()._heartbeat_worker(info)
        starts = self._state.__dict__.setdefault("kit_starts", {})
        started = starts.setdefault(info.id, stored.started_at)
        kept = msgspec.structs.replace(stored, started_at=started)
        with self._state.lock:
            self._state.workers[info.id] = kept
        return kept


class KeepsTheRegistryPerStore(_Broken):
    """Keeps the workers in the store instance, not with the data."""

    def _own(self) -> dict[str, WorkerInfo]:
        own: dict[str, WorkerInfo] = self.__dict__.setdefault("kit_workers", {})
        return own

    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        shared = self._state.workers
        self._state.workers = self._own()
        try:
            return await super()._heartbeat_worker(info)
        finally:
            self._state.workers = shared

    async def _list_workers(self) -> list[WorkerInfo]:
        return [self._own()[i] for i in sorted(self._own())]

    async def _remove_worker(self, worker_id: str) -> bool:
        return self._own().pop(worker_id, None) is not None

    async def _purge_workers(self, seen_before: datetime) -> int:
        doomed = [
            i for i, w in self._own().items() if w.seen_at is not None and w.seen_at < seen_before
        ]
        for worker_id in doomed:
            del self._own()[worker_id]
        return len(doomed)


# --- counts -------------------------------------------------------------------------------------


class AddsTheLastEntryOfAMinutePerCall(_Broken):
    """Keeps one entry per (queue, minute) of a call, the last."""

    async def _add_counts(self, counts: list[Counts]) -> None:
        last = {(c.queue, c.minute): c for c in counts}
        await super()._add_counts(list(last.values()))


class AddsUnderALockOfItsOwn(_Broken):
    """Reads a count, then writes the sum, one addition at a time in each store instance:
    additions through two instances overwrite each other."""

    async def _add_counts(self, counts: list[Counts]) -> None:
        lock = self.__dict__.setdefault("kit_lock", asyncio.Lock())
        async with lock:
            for entry in counts:
                key = (entry.queue, entry.minute)
                before = list(self._state.counts.get(key, [0, 0, 0, 0]))
                await asyncio.sleep(0)
                with self._state.lock:
                    self._state.counts[key] = [
                        before[0] + entry.succeeded,
                        before[1] + entry.failed,
                        before[2] + entry.dead,
                        before[3] + entry.deferred,
                    ]


class PurgesTheMinuteOfTheCutoff(_Broken):
    async def _purge_counts(self, before: datetime) -> int:
        with self._state.lock:
            doomed = [key for key in self._state.counts if key[1] <= before]
            for key in doomed:
                del self._state.counts[key]
            return len(doomed)


class DropsTheWorkersExtras(_Broken):
    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        return await super()._heartbeat_worker(msgspec.structs.replace(info, extra={}))


class AcceptsAnyWorker(_Broken):
    """Registers a worker without checking what it says."""

    async def heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        return await self._run(self._heartbeat_worker(info))


class AcceptsAnyCounts(_Broken):
    """Adds counts without checking them."""

    async def add_counts(self, counts: Sequence[Counts]) -> None:
        await self._run(self._add_counts(list(counts)))


BROKEN_STORES: dict[type, list[str]] = {
    RetryNowMovesDueTasksToNow: [
        "test_retry_now_leaves_a_task_already_due_where_it_stands_in_line",
        STATEFUL,
    ],
    RetryNowRevivesDeadTasks: ["test_retry_now_leaves_running_lapsed_and_finished_tasks_alone"],
    RetryNowResetsThePriority: [
        "test_a_task_retried_now_is_claimed_in_its_priority_order_under_its_controls"
    ],
    PurgesWorkersByTheirStart: ["test_purge_workers_goes_by_the_last_heartbeat_not_the_first"],
    KeepsTheStartAHeartbeatSends: [
        "test_a_heartbeat_stamps_the_store_times_whatever_the_worker_sends"
    ],
    KeysTheStartByHost: ["test_heartbeats_of_several_workers_each_keep_their_own_start"],
    RemembersTheStartOfARemovedWorker: ["test_a_worker_removed_and_heard_from_again_starts_afresh"],
    KeepsTheRegistryPerStore: ["test_the_registry_is_one_for_every_store_instance"],
    AddsTheLastEntryOfAMinutePerCall: [
        "test_every_count_adds_up_over_repeated_additions_and_within_one_call"
    ],
    AddsUnderALockOfItsOwn: ["test_concurrent_additions_through_two_stores_lose_none"],
    PurgesTheMinuteOfTheCutoff: [
        "test_read_counts_takes_the_minute_since_and_purge_counts_keeps_the_minute_before"
    ],
    DropsTheWorkersExtras: ["test_every_field_of_a_worker_is_kept_as_given"],
    AcceptsAnyWorker: ["test_a_bad_worker_registration_raises_validation_error"],
    AcceptsAnyCounts: ["test_counts_must_be_whole_minutes_of_non_negative_numbers"],
}
"""Each broken store and the kit tests that must fail against it."""
