"""Broken stores for what contract versions 3–4 promise of whose a control record is: its
(queue, key)'s alone and the whole fleet's (every store instance, every named worker). Like
``kit_broken_flow``: each a small subclass of the reference memory store that breaks one
promise, and each passes the clauses the kit had before for control records (each breaks what
they never varied). ``BROKEN_STORES`` maps it to the kit tests that must fail against it;
``claim_gate_of`` is the claim gate of a queue built from chosen controls, which the broken
stores of ``kit_broken_controls`` and ``kit_broken_changes`` use too."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import msgspec

from kit_broken_stores import STATEFUL, _Broken
from rdq.spi import (
    ClaimGate,
    Completion,
    Control,
    Status,
    task_keys,
)
from rdq_memory._controls import in_use
from rdq_memory._state import MemoryState


def claim_gate_of(
    state: MemoryState,
    queue: str,
    now: datetime,
    controls: dict[str, Control],
    used: Counter[str] | None = None,
) -> ClaimGate | None:
    """The claim gate of ``queue`` built from ``controls`` (and ``used``, or the live leases)."""
    if not controls:
        return None
    limited = {k for k, c in controls.items() if c.concurrency is not None}
    counted = used if used is not None else in_use(state, queue, limited, now)
    gate = ClaimGate(controls, state.buckets.get(queue, {}), counted, now)
    return None if gate.idle else gate


# --- the scope of a control -------------------------------------------------------------------


class PausesAKeyInEveryQueue(_Broken):
    """A pause of a key holds back that key's tasks in every queue."""

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        controls = dict(self._state.controls.get(queue, {}))
        for name, others in self._state.controls.items():
            for key, control in others.items():
                if name != queue and control.paused and key not in controls:
                    controls[key] = Control(queue=queue, key=key, paused=True)
        return claim_gate_of(self._state, queue, now, controls)


class SharesRateBucketsAcrossQueues(_Broken):
    """Keeps one rate bucket per key, whatever the queue."""

    async def _claim_due(self, queue, limit, lease, worker_id):  # type: ignore[no-untyped-def]
        state = self._state
        shared = state.__dict__.setdefault("kit_shared_buckets", {})
        with state.lock:
            mine = state.buckets.setdefault(queue, {})
            for key in state.controls.get(queue, {}):
                if key in shared:
                    mine[key] = shared[key]
        claimed = await super()._claim_due(queue, limit, lease, worker_id)
        with state.lock:
            shared.update(state.buckets.get(queue, {}))
        return claimed

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        stored = await super()._put_control(control, expected_version)
        if control.key not in self._state.buckets.get(control.queue, {}):  # refilled
            self._state.__dict__.setdefault("kit_shared_buckets", {}).pop(control.key, None)
        return stored


class ListsControlsAsWritten(_Broken):
    """Lists each queue's controls in the order they were first written."""

    async def _list_controls(self, queue: str | None) -> list[Control]:
        listed = await super()._list_controls(queue)
        by_key = {(c.queue, c.key): c for c in listed}
        with self._state.lock:
            order = [(q, k) for q, cs in self._state.controls.items() for k in cs]
        return [by_key[qk] for qk in order if qk in by_key]


class CachesControlsPerStore(_Broken):
    """Reads a queue's controls once per store instance, again only after it wrote one."""

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        seen = self.__dict__.setdefault("kit_seen", {})
        if queue not in seen:
            seen[queue] = dict(self._state.controls.get(queue, {}))
        stored = self._state.controls.get(queue, {})
        controls = {  # what claims took from a gate is seen, a new setting is not
            k: c if k not in stored else msgspec.structs.replace(c, gate=stored[k].gate)
            for k, c in seen[queue].items()
        }
        return claim_gate_of(self._state, queue, now, controls)

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        self.__dict__.setdefault("kit_seen", {}).pop(control.queue, None)
        return await super()._put_control(control, expected_version)


class CountsSlotsPerStore(_Broken):
    """Counts a key's live leases among the claims made through this store instance only."""

    def _claim(self, record, now, lease, worker):  # type: ignore[no-untyped-def]
        super()._claim(record, now, lease, worker)
        self.__dict__.setdefault("kit_mine", set()).add(record.task.id)

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        mine = self.__dict__.setdefault("kit_mine", set())
        used: Counter[str] = Counter()
        for record in self._state.of_queue(queue):
            task = record.task
            expires = task.lease_expires_at
            live = task.status == Status.IN_FLIGHT and expires is not None and expires > now
            if live and task.id in mine:
                used.update(task_keys(task))
        return claim_gate_of(
            self._state, queue, now, dict(self._state.controls.get(queue, {})), used
        )


class CachesTheUseOfASlot(_Broken):
    """Counts a key's live leases once and keeps the count in the store instance, counting
    its own claims in, until one of its own resolutions or the first lease it counted ends:
    a slot freed through another store instance stays taken for it."""

    def _cache(self) -> dict[str, tuple[Counter[str], datetime | None]]:
        cache: dict[str, tuple[Counter[str], datetime | None]]
        cache = self.__dict__.setdefault("kit_counted", {})
        return cache

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        controls = dict(self._state.controls.get(queue, {}))
        counted, first_end = self._cache().get(queue, (None, None))
        if counted is None or (first_end is not None and first_end <= now):
            limited = {k for k, c in controls.items() if c.concurrency is not None}
            counted, first_end = in_use(self._state, queue, limited, now), None
            for record in self._state.of_queue(queue):
                end = record.task.lease_expires_at
                if record.task.status == Status.IN_FLIGHT and end is not None and end > now:
                    first_end = end if first_end is None else min(first_end, end)
            self._cache()[queue] = (counted, first_end)
        return claim_gate_of(self._state, queue, now, controls, Counter(counted))

    async def _claim_due(self, queue, limit, lease, worker_id):  # type: ignore[no-untyped-def]
        claimed = await super()._claim_due(queue, limit, lease, worker_id)
        cached = self._cache().get(queue)
        if cached is not None:
            counted, first_end = cached
            for c in claimed:
                counted.update(task_keys(c.task))
                end = c.task.lease_expires_at
                if end is not None:
                    first_end = end if first_end is None else min(first_end, end)
            self._cache()[queue] = (counted, first_end)
        return claimed

    def _forget(self, task_id: str) -> None:
        record = self._state.tasks.get(task_id)
        if record is not None:
            self._cache().pop(record.task.queue, None)

    async def _complete(self, task_id, token, attempt):  # type: ignore[no-untyped-def]
        await super()._complete(task_id, token, attempt)
        self._forget(task_id)

    async def _reschedule(self, task_id, token, attempt, next_at):  # type: ignore[no-untyped-def]
        await super()._reschedule(task_id, token, attempt, next_at)
        self._forget(task_id)

    async def _dead_letter(self, task_id, token, attempt):  # type: ignore[no-untyped-def]
        await super()._dead_letter(task_id, token, attempt)
        self._forget(task_id)

    async def _complete_many(self, completions: list[Completion]):  # type: ignore[no-untyped-def]
        results = await super()._complete_many(completions)
        for c in completions:
            self._forget(c.task_id)
        return results

    async def _cancel(self, queue: str, task_ids: list[str]) -> int:
        self._cache().pop(queue, None)
        return await super()._cancel(queue, task_ids)

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        self._cache().pop(control.queue, None)
        return await super()._put_control(control, expected_version)


class KeepsRateBucketsPerStore(_Broken):
    """Keeps the rate buckets in the store instance, not with the data."""

    async def _claim_due(self, queue, limit, lease, worker_id):  # type: ignore[no-untyped-def]
        state = self._state
        own = self.__dict__.setdefault("kit_buckets", {})
        with state.lock:
            shared = state.buckets.get(queue, {})
            state.buckets[queue] = own.setdefault(queue, {})
        try:
            return await super()._claim_due(queue, limit, lease, worker_id)
        finally:
            with state.lock:
                state.buckets[queue] = shared

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        stored = await super()._put_control(control, expected_version)
        if control.key not in self._state.buckets.get(control.queue, {}):  # refilled
            own = self.__dict__.setdefault("kit_buckets", {})
            own.get(control.queue, {}).pop(control.key, None)
        return stored


class ChecksVersionsAgainstItsOwnReads(_Broken):
    """Compares the expected version with the last one this store instance read or wrote."""

    def _known(self) -> dict[tuple[str, str], int]:
        known: dict[tuple[str, str], int] = self.__dict__.setdefault("kit_versions", {})
        return known

    async def _list_controls(self, queue: str | None) -> list[Control]:
        listed = await super()._list_controls(queue)
        self._known().update({(c.queue, c.key): c.version for c in listed})
        return listed

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        known = self._known().get((control.queue, control.key))
        if known is not None and known == expected_version:
            current = self._state.controls.get(control.queue, {}).get(control.key)
            expected_version = current.version if current is not None else 0
        stored = await super()._put_control(control, expected_version)
        self._known()[(control.queue, control.key)] = stored.version
        return stored


class CountsSlotsPerWorker(_Broken):
    """Counts the live leases of a key among the claims of the claiming worker only."""

    async def _claim_due(self, queue, limit, lease, worker_id):  # type: ignore[no-untyped-def]
        self.__dict__["kit_worker"] = worker_id
        return await super()._claim_due(queue, limit, lease, worker_id)

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        worker = self.__dict__.get("kit_worker")
        used: Counter[str] = Counter()
        for record in self._state.of_queue(queue):
            task = record.task
            expires = task.lease_expires_at
            live = task.status == Status.IN_FLIGHT and expires is not None and expires > now
            if live and task.claimed_by == worker:
                used.update(task_keys(task))
        return claim_gate_of(
            self._state, queue, now, dict(self._state.controls.get(queue, {})), used
        )


BROKEN_STORES: dict[type, list[str]] = {
    PausesAKeyInEveryQueue: [
        "test_the_same_key_in_two_queues_is_two_controls_that_never_touch",
        STATEFUL,
    ],
    SharesRateBucketsAcrossQueues: [
        "test_gates_and_rate_buckets_of_one_key_in_two_queues_are_apart"
    ],
    ListsControlsAsWritten: ["test_list_controls_lists_by_queue_then_key", STATEFUL],
    CachesControlsPerStore: [
        "test_a_control_written_through_one_store_holds_for_claims_through_another"
    ],
    CountsSlotsPerStore: ["test_limits_hold_across_store_instances_and_named_workers"],
    CachesTheUseOfASlot: ["test_a_slot_freed_through_one_store_is_taken_through_another"],
    KeepsRateBucketsPerStore: ["test_limits_hold_across_store_instances_and_named_workers"],
    ChecksVersionsAgainstItsOwnReads: [
        "test_of_racing_writers_through_two_stores_exactly_one_succeeds"
    ],
    CountsSlotsPerWorker: ["test_a_limit_counts_the_claims_of_every_worker"],
}
"""Each broken store and the kit tests that must fail against it."""
