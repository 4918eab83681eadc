"""Broken stores for contract version 3 — control records and the claims that honour them, the
worker registry, the counts. Like ``kit_broken_stores``: each a small subclass of the
reference memory store that breaks one promise; ``BROKEN_STORES`` maps it to the kit tests
that must fail against it."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from datetime import datetime

import msgspec

from kit_broken_stores import STATEFUL, _Broken
from rdq.spi import Bucket, ClaimGate, Control, Counts, Envelope, Status, WorkerInfo
from rdq_memory import _controls

# --- compare-and-set ------------------------------------------------------------------------


class PutControlIgnoresTheVersion(_Broken):
    async def _put_control(self, control: Control, expected_version: int) -> Control:
        current = self._state.controls.get(control.queue, {}).get(control.key)
        return await super()._put_control(control, current.version if current else 0)


class PutControlKeepsTheVersion(_Broken):
    async def _put_control(self, control: Control, expected_version: int) -> Control:
        stored = await super()._put_control(control, expected_version)
        kept = msgspec.structs.replace(stored, version=max(1, expected_version))
        with self._state.lock:
            self._state.controls[control.queue][control.key] = kept
        return kept


class ReadsThenWritesControls(_Broken):
    """Checks the version, then writes after a pause: racing writers both pass the check."""

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        current = self._state.controls.get(control.queue, {}).get(control.key)
        if (current.version if current else 0) == expected_version:
            await asyncio.sleep(0.01)
            with self._state.lock:
                return _controls.put_control(
                    self._state,
                    control,
                    self._state.controls[control.queue][control.key].version
                    if control.key in self._state.controls.get(control.queue, {})
                    else 0,
                    self._clock_now(),
                )
        return await super()._put_control(control, expected_version)


class DeleteIgnoresTheVersion(_Broken):
    async def _delete_control(self, queue: str, key: str, expected_version: int) -> bool:
        current = self._state.controls.get(queue, {}).get(key)
        return await super()._delete_control(queue, key, current.version if current else 0)


# --- claims ---------------------------------------------------------------------------------


class ClaimsPausedTasks(_Broken):
    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        gate = super()._claim_gate(queue, now)
        if gate is not None:
            gate.controls = {
                k: msgspec.structs.replace(c, paused=False) for k, c in gate.controls.items()
            }
            gate.paused = frozenset()
        return gate


class StopsAtTheFirstHeldBackTask(_Broken):
    """Claims nothing more once one task is held back (waits on it instead of skipping)."""

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        gate = super()._claim_gate(queue, now)
        if gate is None:
            return None

        class Sticky(ClaimGate):
            stuck = False

            def admits(self, keys: Iterable[str]) -> bool:
                if self.stuck or not super().admits(keys):
                    self.stuck = True
                    return False
                return True

        broken = Sticky({}, {}, {}, now)
        broken.__dict__.update(gate.__dict__)
        return broken


class GatesNeverEmpty(_Broken):
    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        gate = super()._claim_gate(queue, now)
        if gate is not None:
            gate.gates = {k: max(v or 0, 1) for k, v in gate.gates.items()}
        return gate


class TakingFromAGateBumpsTheVersion(_Broken):
    async def _claim_due(self, queue, limit, lease, worker_id):  # type: ignore[no-untyped-def]
        claimed = await super()._claim_due(queue, limit, lease, worker_id)
        with self._state.lock:
            controls = self._state.controls.get(queue, {})
            for key, control in list(controls.items()):
                if control.gate is not None and claimed:
                    controls[key] = msgspec.structs.replace(control, version=control.version + 1)
        return claimed


class IgnoresConcurrency(_Broken):
    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        gate = super()._claim_gate(queue, now)
        if gate is not None:
            gate.controls = {
                k: msgspec.structs.replace(c, concurrency=None) for k, c in gate.controls.items()
            }
        return gate


class CountsLapsedLeasesAsHeld(_Broken):
    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        gate = super()._claim_gate(queue, now)
        if gate is not None:
            for record in self._state.of_queue(queue):
                task = record.task
                expires = task.lease_expires_at
                if task.status == Status.IN_FLIGHT and expires is not None and expires <= now:
                    for key in ("*", f"handler:{task.handler_ref}", *task.keys):
                        control = gate.controls.get(key)
                        if control is not None and control.concurrency is not None:
                            gate.in_use[key] += 1
        return gate


class IgnoresConcurrencyOfTheQueueAndHandlers(_Broken):
    """Honours a concurrency limit of a task key, not of ``*`` or ``handler:<ref>``."""

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        gate = super()._claim_gate(queue, now)
        if gate is not None:
            gate.controls = {
                k: msgspec.structs.replace(c, concurrency=None)
                if k == "*" or k.startswith("handler:")
                else c
                for k, c in gate.controls.items()
            }
        return gate


class ChecksOnlyTheFirstLimitedKey(_Broken):
    """Lets a task through when its first limited key has room, whatever its others say."""

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        gate = super()._claim_gate(queue, now)
        if gate is None:
            return None

        class FirstOnly(ClaimGate):
            def admits(self, keys: Iterable[str]) -> bool:
                first = [k for k in keys if k in self.controls][:1]
                return super().admits(first)

        broken = FirstOnly({}, {}, {}, now)
        broken.__dict__.update(gate.__dict__)
        return broken


class KeepsTheSlotOfAFailedAttempt(_Broken):
    """Frees a task's concurrency slots when it completes, not when it is rescheduled or
    dead-lettered."""

    leaked: Counter[str]

    async def _resolved(self, task_id: str) -> None:
        if not hasattr(self, "leaked"):
            self.leaked = Counter()
        record = self._state.tasks.get(task_id)
        if record is not None:
            self.leaked.update(record.task.keys)

    async def _reschedule(self, task_id, token, attempt, next_at):  # type: ignore[no-untyped-def]
        await super()._reschedule(task_id, token, attempt, next_at)
        await self._resolved(task_id)

    async def _dead_letter(self, task_id, token, attempt):  # type: ignore[no-untyped-def]
        await super()._dead_letter(task_id, token, attempt)
        await self._resolved(task_id)

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        gate = super()._claim_gate(queue, now)
        if gate is not None:
            gate.in_use.update(getattr(self, "leaked", Counter()))
        return gate


class ReportsNoUse(_Broken):
    async def _list_controls(self, queue: str | None) -> list[Control]:
        return [msgspec.structs.replace(c, in_use=0) for c in await super()._list_controls(queue)]


class IgnoresRates(_Broken):
    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        gate = super()._claim_gate(queue, now)
        if gate is not None:
            gate.buckets = {}
        return gate


class BucketHoldsAWholePeriod(_Broken):
    """Lets ``rate`` claims through at once, whatever the burst."""

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        gate = super()._claim_gate(queue, now)
        if gate is not None:
            for key, bucket in gate.buckets.items():
                bucket.tokens = max(bucket.tokens, float(gate.controls[key].rate or 0))
        return gate


class SpendsABucketReadBeforeTheClaim(_Broken):
    """Reads the rate buckets, yields, then claims from what it read: claims made meanwhile
    spend the same tokens again (one claimant at a time sees nothing wrong)."""

    async def _claim_due(self, queue, limit, lease, worker_id):  # type: ignore[no-untyped-def]
        with self._state.lock:
            seen = {
                k: Bucket(b.tokens, b.at) for k, b in self._state.buckets.get(queue, {}).items()
            }
        await asyncio.sleep(0.01)
        with self._state.lock:
            self._state.buckets.setdefault(queue, {}).update(seen)
        return await super()._claim_due(queue, limit, lease, worker_id)


class KeepsTheBucketWhenTheRateChanges(_Broken):
    async def _put_control(self, control: Control, expected_version: int) -> Control:
        with self._state.lock:
            kept = dict(self._state.buckets.get(control.queue, {}))
        stored = await super()._put_control(control, expected_version)
        with self._state.lock:
            self._state.buckets.setdefault(control.queue, {}).update(kept)
        return stored


class RetryNowMovesRunningTasks(_Broken):
    async def _retry_now(self, queue: str, task_ids: list[str]) -> int:
        moved = await super()._retry_now(queue, task_ids)
        with self._state.lock:
            for task_id in task_ids:
                record = self._state.tasks.get(task_id)
                if record is not None and record.task.status == Status.IN_FLIGHT:
                    moved += 1
        return moved


class DropsTheTaskKeys(_Broken):
    async def _enqueue_batch(self, tasks: list[Envelope], delay):  # type: ignore[no-untyped-def]
        return await super()._enqueue_batch(
            [msgspec.structs.replace(t, keys=[]) for t in tasks], delay
        )


# --- the worker registry --------------------------------------------------------------------


class EveryHeartbeatIsAStart(_Broken):
    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        stored = await super()._heartbeat_worker(info)
        fresh = msgspec.structs.replace(stored, started_at=stored.seen_at)
        with self._state.lock:
            self._state.workers[info.id] = fresh
        return fresh


class PurgesEveryWorker(_Broken):
    async def _purge_workers(self, seen_before: datetime) -> int:
        with self._state.lock:
            count = len(self._state.workers)
            self._state.workers.clear()
            return count


class ListsWorkersUnordered(_Broken):
    async def _list_workers(self) -> list[WorkerInfo]:
        return list(reversed(await super()._list_workers()))


# --- counts ---------------------------------------------------------------------------------


class CountsOverwrite(_Broken):
    async def _add_counts(self, counts: list[Counts]) -> None:
        with self._state.lock:
            for entry in counts:
                self._state.counts.pop((entry.queue, entry.minute), None)
        await super()._add_counts(counts)


class CountsReadThenWritten(_Broken):
    """Reads the count, pauses, writes the sum: concurrent additions overwrite each other."""

    async def _add_counts(self, counts: list[Counts]) -> None:
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


class PurgeCountsKeepsEverything(_Broken):
    async def _purge_counts(self, before: datetime) -> int:
        return 0


CAS = "test_put_control_over_a_stale_version_raises_control_conflict_and_changes_nothing"

BROKEN_STORES: dict[type, list[str]] = {
    PutControlIgnoresTheVersion: [CAS, STATEFUL],
    PutControlKeepsTheVersion: [CAS, STATEFUL],
    ReadsThenWritesControls: ["test_of_racing_writers_of_one_version_exactly_one_succeeds"],
    DeleteIgnoresTheVersion: ["test_delete_control_is_fenced_on_its_version"],
    ClaimsPausedTasks: [
        "test_a_paused_queue_is_not_claimed_and_resumes_when_the_pause_is_lifted",
        "test_a_paused_handler_or_task_key_holds_back_only_its_tasks",
        STATEFUL,
    ],
    StopsAtTheFirstHeldBackTask: [
        "test_a_paused_handler_or_task_key_holds_back_only_its_tasks",
        STATEFUL,
    ],
    GatesNeverEmpty: ["test_a_gate_lets_exactly_that_many_claims_through_and_keeps_the_version"],
    TakingFromAGateBumpsTheVersion: [
        "test_a_gate_lets_exactly_that_many_claims_through_and_keeps_the_version",
        STATEFUL,
    ],
    IgnoresConcurrency: [
        "test_a_concurrency_limit_is_never_exceeded_by_concurrent_claimants",
        STATEFUL,
    ],
    CountsLapsedLeasesAsHeld: [
        "test_a_concurrency_slot_comes_back_on_resolution_and_when_a_lease_lapses",
        STATEFUL,
    ],
    IgnoresConcurrencyOfTheQueueAndHandlers: [
        "test_a_concurrency_limit_of_the_queue_or_a_handler_counts_every_task_of_it",
        STATEFUL,
    ],
    ChecksOnlyTheFirstLimitedKey: [
        "test_a_task_with_several_limited_keys_needs_and_takes_a_slot_of_each",
        STATEFUL,
    ],
    KeepsTheSlotOfAFailedAttempt: [
        "test_a_concurrency_slot_comes_back_when_its_task_is_rescheduled_or_dead_lettered",
        STATEFUL,
    ],
    ReportsNoUse: ["test_a_concurrency_limit_is_never_exceeded_by_concurrent_claimants", STATEFUL],
    IgnoresRates: ["test_a_rate_limit_holds_over_any_window_of_its_period"],
    BucketHoldsAWholePeriod: ["test_a_rate_limit_holds_over_any_window_of_its_period"],
    SpendsABucketReadBeforeTheClaim: [
        "test_a_rate_limit_holds_over_any_window_under_concurrent_claimants"
    ],
    KeepsTheBucketWhenTheRateChanges: ["test_a_change_of_rate_refills_the_bucket"],
    RetryNowMovesRunningTasks: [
        "test_retry_now_makes_waiting_tasks_due_and_ignores_the_others",
        STATEFUL,
    ],
    DropsTheTaskKeys: ["test_a_task_keeps_its_keys_through_every_change_of_status", STATEFUL],
    EveryHeartbeatIsAStart: [
        "test_a_heartbeat_stores_the_worker_with_the_store_time_and_keeps_its_start"
    ],
    PurgesEveryWorker: ["test_purge_workers_forgets_only_those_seen_before_the_cutoff"],
    ListsWorkersUnordered: ["test_workers_are_listed_by_id_and_removed_one_by_one"],
    CountsOverwrite: ["test_counts_add_up_per_queue_and_minute"],
    CountsReadThenWritten: ["test_concurrent_additions_lose_none"],
    PurgeCountsKeepsEverything: ["test_counts_of_every_queue_and_the_purge_of_old_minutes"],
}
"""Each broken store and the kit tests that must fail against it."""
