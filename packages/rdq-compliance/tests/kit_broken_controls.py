"""Broken stores for what contract versions 3–4 promise of controls and the life of a lease:
reclaims of lapsed leases, extensions (the rule of a lapsed lease under a limit), cancels,
batches of completions, limits set or lowered while tasks run, every way a task becomes due.
Like ``kit_broken_flow``: each a small subclass of the reference memory store that breaks one
promise and passes the clauses the kit had before for control records. ``BROKEN_STORES`` maps
it to the kit tests that must fail against it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta

import msgspec

from kit_broken_scope import claim_gate_of
from kit_broken_stores import STATEFUL, _Broken
from rdq.errors import StaleClaim
from rdq.spi import (
    Claimed,
    ClaimGate,
    Completion,
    Control,
    Envelope,
    Status,
    bounds,
    task_keys,
)
from rdq_memory._claims import keep_gate
from rdq_memory._codec import read
from rdq_memory._controls import in_use

# --- controls and the life of a lease ----------------------------------------------------------


class _PreClaimsLapsedLeases(_Broken):
    """Claims some lapsed leases of a queue through a gate of its own before the real claim."""

    def _lapsed_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        raise NotImplementedError

    def _takes(self, real: ClaimGate | None, own: ClaimGate | None, keys: list[str]) -> bool:
        """Whether the pre-claim takes a lapsed lease with ``keys``."""
        raise NotImplementedError

    async def _claim_due(self, queue, limit, lease, worker_id):  # type: ignore[no-untyped-def]
        state = self._state
        taken: list[Claimed] = []
        with state.lock:
            now = self._clock_now()
            real = self._claim_gate(queue, now)
            own = self._lapsed_gate(queue, now)
            lapsed = sorted(
                (
                    r
                    for r in state.of_queue(queue)
                    if r.task.status == Status.IN_FLIGHT
                    and r.task.lease_expires_at is not None
                    and r.task.lease_expires_at <= now
                ),
                key=lambda r: (-r.task.priority, r.task.lease_expires_at),
            )
            for record in lapsed:
                keys = task_keys(record.task)
                if len(taken) == limit or not self._takes(real, own, keys):
                    continue
                if own is not None:
                    own.take(keys)
                self._claim(record, now, lease, worker_id)
                taken.append(Claimed(read(record), record.token or ""))
            if own is not None and taken:
                keep_gate(state, queue, own)
        if len(taken) == limit:
            return taken
        return taken + await super()._claim_due(queue, limit - len(taken), lease, worker_id)


class ReclaimsLapsedLeasesOfPausedKeys(_PreClaimsLapsedLeases):
    """Honours a pause for pending tasks only: a lapsed lease is reclaimed all the same."""

    def _lapsed_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        controls = {
            k: msgspec.structs.replace(c, paused=False)
            for k, c in self._state.controls.get(queue, {}).items()
        }
        return claim_gate_of(self._state, queue, now, controls)

    def _takes(self, real: ClaimGate | None, own: ClaimGate | None, keys: list[str]) -> bool:
        held = real is not None and not real.admits(keys)  # what the pause holds back
        return held and (own is None or own.admits(keys))


class ReclaimsPastTheLimits(_PreClaimsLapsedLeases):
    """Reclaims a lapsed lease whatever its gates, buckets and slots say (pauses honoured)."""

    def _lapsed_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        controls = {
            k: Control(queue=queue, key=k, paused=c.paused)
            for k, c in self._state.controls.get(queue, {}).items()
        }
        return claim_gate_of(self._state, queue, now, controls)

    def _takes(self, real: ClaimGate | None, own: ClaimGate | None, keys: list[str]) -> bool:
        return real is not None and (own is None or own.admits(keys))


class SlotsEndAtTheFirstExpiry(_Broken):
    """Frees a slot when the lease the claim gave ends, whatever extended it since."""

    def _claim(self, record, now, lease, worker):  # type: ignore[no-untyped-def]
        super()._claim(record, now, lease, worker)
        ends = self._state.__dict__.setdefault("kit_first_ends", {})
        ends[record.task.id] = record.task.lease_expires_at

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        ends = self._state.__dict__.setdefault("kit_first_ends", {})
        used: Counter[str] = Counter()
        for record in self._state.of_queue(queue):
            task = record.task
            end = ends.get(task.id, task.lease_expires_at)
            if task.status == Status.IN_FLIGHT and end is not None and end > now:
                used.update(task_keys(task))
        return claim_gate_of(
            self._state, queue, now, dict(self._state.controls.get(queue, {})), used
        )


class ExtendsLapsedLeasesIntoTakenSlots(_Broken):
    """Extends a lapsed lease whether or not another task took its slot (two live leases
    under a limit of one: the reference store's own mistake before contract 4's rule)."""

    async def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        state = self._state
        with state.lock:
            record = self._fenced(task_id, token)
            expires = self._clock_now() + lease
            record.task.lease_expires_at = expires
            record.bump()
            state.schedule(record)
            return expires


class RefusesLapsedExtensionsUnderALimit(_Broken):
    """Refuses to extend any lapsed lease of a task with a concurrency-limited key."""

    async def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        with self._state.lock:
            record = self._fenced(task_id, token)
            task = record.task
            controls = self._state.controls.get(task.queue, {})
            expires = task.lease_expires_at
            lapsed = expires is not None and expires <= self._clock_now()
            if lapsed and any(
                k in controls and controls[k].concurrency is not None for k in task_keys(task)
            ):
                raise StaleClaim(task_id)
        return await super()._extend_lease(task_id, token, lease)


class _LeaksSlots(_Broken):
    """Keeps counting the slots of the tasks it noted."""

    def _leak(self, task_ids: Iterable[str]) -> None:
        leaked = self._state.__dict__.setdefault("kit_leaked", Counter())
        for task_id in task_ids:
            record = self._state.tasks.get(task_id)
            if record is not None:
                leaked.update(task_keys(record.task))

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        leaked = self._state.__dict__.setdefault("kit_leaked", Counter())
        controls = dict(self._state.controls.get(queue, {}))
        limited = {k for k, c in controls.items() if c.concurrency is not None}
        return claim_gate_of(
            self._state, queue, now, controls, in_use(self._state, queue, limited, now) + leaked
        )


class CancelledTasksKeepTheirSlots(_LeaksSlots):
    async def _cancel(self, queue: str, task_ids: list[str]) -> int:
        cancelled = await super()._cancel(queue, task_ids)
        self._leak(task_ids)
        return cancelled


class CompleteManyKeepsTheSlots(_LeaksSlots):
    async def _complete_many(self, completions: list[Completion]):  # type: ignore[no-untyped-def]
        results = await super()._complete_many(completions)
        self._leak(c.task_id for c, r in zip(completions, results, strict=True) if r is None)
        return results


class CountsOnlyLeasesTakenUnderALimit(_Broken):
    """Counts a key's live leases among the claims made while the key had a concurrency limit
    (a set of leases kept only for limited keys)."""

    def _claim(self, record, now, lease, worker):  # type: ignore[no-untyped-def]
        controls = self._state.controls.get(record.task.queue, {})
        noted = self._state.__dict__.setdefault("kit_noted", set())
        for key in task_keys(record.task):
            if key in controls and controls[key].concurrency is not None:
                noted.add((record.task.id, key))
        super()._claim(record, now, lease, worker)

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        noted = self._state.__dict__.setdefault("kit_noted", set())
        used: Counter[str] = Counter()
        for record in self._state.of_queue(queue):
            task = record.task
            expires = task.lease_expires_at
            if task.status == Status.IN_FLIGHT and expires is not None and expires > now:
                used.update(k for k in task_keys(task) if (task.id, k) in noted)
        return claim_gate_of(
            self._state, queue, now, dict(self._state.controls.get(queue, {})), used
        )


class RescheduledTasksLoseTheirKeys(_Broken):
    async def _reschedule(self, task_id, token, attempt, next_at):  # type: ignore[no-untyped-def]
        await super()._reschedule(task_id, token, attempt, next_at)
        with self._state.lock:
            record = self._state.tasks.get(task_id)
            if record is not None:
                record.task.keys = []


class ChecksRoomOnEveryExtension(_Broken):
    """Extends a lease only while its keys' concurrency limits are not exceeded, counting the
    lease itself: the live leases over a limit lowered below its use lose their slots."""

    async def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        with self._state.lock:
            task = self._fenced(task_id, token).task
            controls = self._state.controls.get(task.queue, {})
            limits = {
                k: c.concurrency
                for k in task_keys(task)
                if (c := controls.get(k)) is not None and c.concurrency is not None
            }
            used = in_use(self._state, task.queue, set(limits), self._clock_now())
            if any(used[k] > limit for k, limit in limits.items()):
                raise StaleClaim(task_id)
        return await super()._extend_lease(task_id, token, lease)


class _CountsFromALeaseFloor(_Broken):
    """Counts a concurrency limit's live leases from a floor, as PostgreSQL's schema 17 does
    (the earliest end of a live lease of the queue, raised at most once a second), but lowers
    it only at the writes named in ``lowers``: a lease another write ends below the floor is
    not counted until the next raise passes it by too."""

    lowers: frozenset[str] = frozenset()

    def _floors(self) -> dict[str, tuple[datetime | None, datetime]]:
        floors: dict[str, tuple[datetime | None, datetime]]
        floors = self._state.__dict__.setdefault("kit_lease_floors", {})
        return floors

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        floors = self._floors()
        kept = floors.get(queue)
        if kept is None or now - kept[1] >= timedelta(seconds=1):
            # the raise reads from the floor up: no live lease ends below it
            was = kept[0] if kept is not None else None
            ends = [
                r.task.lease_expires_at
                for r in self._state.of_queue(queue)
                if r.task.status == Status.IN_FLIGHT
                and r.task.lease_expires_at is not None
                and r.task.lease_expires_at > now
                and (was is None or r.task.lease_expires_at >= was)
            ]
            kept = floors[queue] = (min(ends, default=None), now)
        low = kept[0]
        used: Counter[str] = Counter()
        for record in self._state.of_queue(queue):
            task = record.task
            end = task.lease_expires_at
            live = task.status == Status.IN_FLIGHT and end is not None and end > now
            if live and (low is None or (end is not None and end >= low)):
                used.update(task_keys(task))
        return claim_gate_of(
            self._state, queue, now, dict(self._state.controls.get(queue, {})), used
        )

    def _lower(self, queue: str, end: datetime, write: str) -> None:
        floors = self._floors()
        kept = floors.get(queue)
        if write in self.lowers and kept is not None and kept[0] is not None and end < kept[0]:
            floors[queue] = (end, kept[1])

    def _claim(self, record, now, lease, worker):  # type: ignore[no-untyped-def]
        super()._claim(record, now, lease, worker)
        self._lower(record.task.queue, now + lease, "claim")

    async def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        expires = await super()._extend_lease(task_id, token, lease)
        record = self.record(task_id)
        if record is not None:
            self._lower(record.task.queue, expires, "extend")
        return expires


class LeaseFloorNotLoweredByClaims(_CountsFromALeaseFloor):
    lowers = frozenset({"extend"})


class LeaseFloorNotLoweredByExtensions(_CountsFromALeaseFloor):
    lowers = frozenset({"claim"})


class AcceptsAnyKeys(_Broken):
    """Checks a task, but not its keys."""

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        bounds.check_task(msgspec.structs.replace(task, keys=[]))
        return await self._run(self._enqueue(task, delay))


BROKEN_STORES: dict[type, list[str]] = {
    ReclaimsLapsedLeasesOfPausedKeys: ["test_a_pause_holds_back_the_reclaim_of_a_lapsed_lease"],
    ReclaimsPastTheLimits: ["test_a_reclaim_takes_from_gates_and_buckets_and_needs_a_slot"],
    SlotsEndAtTheFirstExpiry: ["test_an_extended_lease_keeps_its_slot_past_its_first_expiry"],
    ExtendsLapsedLeasesIntoTakenSlots: [
        "test_an_extension_of_a_lapsed_lease_whose_slot_was_taken_raises_stale_claim"
    ],
    RefusesLapsedExtensionsUnderALimit: [
        "test_an_extension_of_a_lapsed_lease_takes_its_slot_again_when_one_is_free"
    ],
    CancelledTasksKeepTheirSlots: ["test_a_cancelled_task_frees_its_slot", STATEFUL],
    CompleteManyKeepsTheSlots: ["test_complete_many_frees_the_slot_of_every_task_it_completes"],
    CountsOnlyLeasesTakenUnderALimit: ["test_a_limit_set_while_tasks_run_counts_them"],
    RescheduledTasksLoseTheirKeys: [
        "test_every_way_a_task_becomes_due_keeps_it_under_its_keys_controls"
    ],
    ChecksRoomOnEveryExtension: [
        "test_a_limit_lowered_below_its_use_holds_back_claims_and_keeps_the_live_leases"
    ],
    AcceptsAnyKeys: ["test_enqueue_of_a_task_with_bad_keys_raises_validation_error"],
    LeaseFloorNotLoweredByClaims: [
        "test_a_lease_claimed_to_end_before_leases_taken_earlier_holds_its_slot"
    ],
    LeaseFloorNotLoweredByExtensions: [
        "test_a_lease_extended_to_end_before_leases_taken_earlier_holds_its_slot"
    ],
}
"""Each broken store and the kit tests that must fail against it."""
