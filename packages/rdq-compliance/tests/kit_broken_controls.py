"""Broken stores for what contract versions 3–4 promise of control records beyond one queue,
one store instance, one anonymous claimant and fresh controls on pending tasks: the scope of
a control, controls and the life of a lease, controls that change. Like ``kit_broken_flow``:
each a small subclass of the reference memory store that breaks one promise, and each passes
the clauses the kit had before (each breaks what they never varied). ``BROKEN_STORES`` maps
it to the kit tests that must fail against it."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta

import msgspec

from kit_broken_stores import STATEFUL, _Broken
from rdq.errors import ControlConflict, StaleClaim
from rdq.spi import (
    Claimed,
    ClaimGate,
    ClaimOrder,
    Completion,
    Control,
    Status,
    task_keys,
)
from rdq_memory._claims import keep_gate
from rdq_memory._codec import read
from rdq_memory._controls import in_use
from rdq_memory._state import MemoryState


def _gate(
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
        return _gate(self._state, queue, now, controls)


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
        return _gate(self._state, queue, now, controls)

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
        return _gate(self._state, queue, now, dict(self._state.controls.get(queue, {})), used)


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
        return _gate(self._state, queue, now, controls, Counter(counted))

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
        return _gate(self._state, queue, now, dict(self._state.controls.get(queue, {})), used)


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
        return _gate(self._state, queue, now, controls)

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
        return _gate(self._state, queue, now, controls)

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
        return _gate(self._state, queue, now, dict(self._state.controls.get(queue, {})), used)


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
        return _gate(
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
        return _gate(self._state, queue, now, dict(self._state.controls.get(queue, {})), used)


class RescheduledTasksLoseTheirKeys(_Broken):
    async def _reschedule(self, task_id, token, attempt, next_at):  # type: ignore[no-untyped-def]
        await super()._reschedule(task_id, token, attempt, next_at)
        with self._state.lock:
            record = self._state.tasks.get(task_id)
            if record is not None:
                record.task.keys = []


# --- controls that change -----------------------------------------------------------------------


class ReportsTheUseItWasGiven(_Broken):
    """Stores the ``in_use`` a written control carries, and lists it instead of counting."""

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        stored = await super()._put_control(control, expected_version)
        given = self._state.__dict__.setdefault("kit_given", {})
        given[(control.queue, control.key)] = control.in_use
        return stored

    async def _list_controls(self, queue: str | None) -> list[Control]:
        given = self._state.__dict__.setdefault("kit_given", {})
        return [
            c
            if given.get((c.queue, c.key)) is None
            else msgspec.structs.replace(c, in_use=given[(c.queue, c.key)])
            for c in await super()._list_controls(queue)
        ]


class KeepsTheLimitsItIsNotGiven(_Broken):
    """Keeps the stored concurrency and rate limit of a control written without them."""

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        current = self._state.controls.get(control.queue, {}).get(control.key)
        if current is not None:
            control = msgspec.structs.replace(
                control,
                concurrency=control.concurrency
                if control.concurrency is not None
                else current.concurrency,
                rate=control.rate if control.rate is not None else current.rate,
                per=control.per if control.rate is not None else current.per,
                burst=control.burst if control.rate is not None else current.burst,
            )
        return await super()._put_control(control, expected_version)


class ConflictsCarryAnOldState(_Broken):
    """A ``ControlConflict`` carries the record's current version with the state it had the
    version before."""

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        old = self._state.__dict__.setdefault("kit_old_state", {})
        current = self._state.controls.get(control.queue, {}).get(control.key)
        try:
            stored = await super()._put_control(control, expected_version)
        except ControlConflict as conflict:
            found = conflict.found
            previous = old.get((control.queue, control.key))
            if found is not None and previous is not None:
                found = msgspec.structs.replace(found, state=previous)
            raise ControlConflict(control.queue, control.key, found) from None
        if current is not None:
            old[(control.queue, control.key)] = current.state
        return stored


class RefillsOnlyWhenTheRateChanges(_Broken):
    """Keeps the bucket through a change of ``per`` or ``burst``."""

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        current = self._state.controls.get(control.queue, {}).get(control.key)
        kept = self._state.buckets.get(control.queue, {}).get(control.key)
        stored = await super()._put_control(control, expected_version)
        if current is not None and kept is not None and current.rate == control.rate:
            self._state.buckets.setdefault(control.queue, {})[control.key] = kept
        return stored


class EveryWriteRefillsTheBucket(_Broken):
    async def _put_control(self, control: Control, expected_version: int) -> Control:
        stored = await super()._put_control(control, expected_version)
        self._state.buckets.get(control.queue, {}).pop(control.key, None)
        return stored


class _RefillsAtAnotherPeriod(_Broken):
    """Refills every bucket as if its period were ``_period(per)``."""

    @staticmethod
    def _period(per: float) -> float:
        raise NotImplementedError

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        controls = {
            k: c if c.rate is None else msgspec.structs.replace(c, per=self._period(c.per))
            for k, c in self._state.controls.get(queue, {}).items()
        }
        return _gate(self._state, queue, now, controls)


class IgnoresThePeriod(_RefillsAtAnotherPeriod):
    """Refills ``rate`` tokens a second, whatever ``per`` says."""

    @staticmethod
    def _period(per: float) -> float:
        return 1.0


class RoundsThePeriodUpToWholeSeconds(_RefillsAtAnotherPeriod):
    @staticmethod
    def _period(per: float) -> float:
        return float(max(1, math.ceil(per)))


class KeepsTheBucketOfADeletedControl(_Broken):
    async def _delete_control(self, queue: str, key: str, expected_version: int) -> bool:
        kept = self._state.buckets.get(queue, {}).get(key)
        deleted = await super()._delete_control(queue, key, expected_version)
        if kept is not None:
            self._state.__dict__.setdefault("kit_kept", {})[(queue, key)] = kept
        return deleted

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        stored = await super()._put_control(control, expected_version)
        kept = self._state.__dict__.setdefault("kit_kept", {}).pop(
            (control.queue, control.key), None
        )
        if kept is not None and expected_version == 0:
            self._state.buckets.setdefault(control.queue, {})[control.key] = kept
        return stored


class HeldBackTasksSpendTheirOtherKeys(_Broken):
    """Takes from each gate and bucket of a task's keys as it checks them, so a task that a
    later key holds back has spent the earlier ones."""

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        gate = super()._claim_gate(queue, now)
        if gate is None:
            return None

        class Eager(ClaimGate):
            def admits(self, keys: Iterable[str]) -> bool:
                keys = list(keys)
                for key in keys:
                    if key not in self.controls:
                        continue
                    if not self._room(key):
                        return False
                    if key in self.gates:
                        self.gates[key] = (self.gates[key] or 0) - 1
                    if key in self.buckets:
                        self.buckets[key].tokens -= 1
                for key in keys:  # the slots are taken only when the task is
                    if key in self.controls and self.controls[key].concurrency is not None:
                        self.in_use[key] += 1
                return True

            def take(self, keys: Iterable[str]) -> None:
                return None

        broken = Eager({}, {}, {}, now)
        broken.__dict__.update(gate.__dict__)
        return broken


class SpendsOnlyTheFirstBucket(_Broken):
    """Takes a token from the first rate-limited key of a task only."""

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        gate = super()._claim_gate(queue, now)
        if gate is None:
            return None

        class FirstBucket(ClaimGate):
            def take(self, keys: Iterable[str]) -> None:
                keys = list(keys)
                rated = [k for k in keys if k in self.buckets]
                saved = {k: self.buckets[k].tokens for k in rated[1:]}
                super().take(keys)
                for key, tokens in saved.items():
                    self.buckets[key].tokens = tokens

        broken = FirstBucket({}, {}, {}, now)
        broken.__dict__.update(gate.__dict__)
        return broken


class LooksAtTheFirstCandidatesOnly(_Broken):
    """Gives up a claim after 64 candidates it held back."""

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        gate = super()._claim_gate(queue, now)
        if gate is None:
            return None

        class Bounded(ClaimGate):
            held = 0

            def admits(self, keys: Iterable[str]) -> bool:
                if self.held >= 64:
                    return False
                if super().admits(keys):
                    return True
                self.held += 1
                return False

        broken = Bounded({}, {}, {}, now)
        broken.__dict__.update(gate.__dict__)
        return broken


class _KeepsTheFirstOrder(_Broken):
    """Orders a queue's claims by the first fair prefix or aging it saw set."""

    field = ""

    def _claim_order(self, queue: str) -> ClaimOrder:
        order = super()._claim_order(queue)
        first = self._state.__dict__.setdefault(f"kit_first_{self.field}", {})
        now = getattr(order, self.field)
        if now is None:
            first.pop(queue, None)
            return order
        kept = first.setdefault(queue, now)
        return dataclasses.replace(order, **{self.field: kept})


class FairGroupsKeepTheirFirstPrefix(_KeepsTheFirstOrder):
    field = "fair"


class AgingKeepsItsFirstValue(_KeepsTheFirstOrder):
    field = "aging"


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
    ReportsTheUseItWasGiven: [
        "test_a_control_read_changed_and_written_back_keeps_what_the_store_owns"
    ],
    KeepsTheLimitsItIsNotGiven: [
        "test_put_control_replaces_every_field_and_a_plain_record_holds_nothing_back"
    ],
    ConflictsCarryAnOldState: ["test_racing_read_modify_write_loops_lose_no_update"],
    RefillsOnlyWhenTheRateChanges: ["test_a_change_of_per_or_of_burst_alone_refills_the_bucket"],
    EveryWriteRefillsTheBucket: ["test_a_change_of_anything_but_the_rate_keeps_the_bucket"],
    IgnoresThePeriod: ["test_a_rate_limit_holds_over_any_window_of_a_period_longer_than_a_second"],
    RoundsThePeriodUpToWholeSeconds: [
        "test_a_rate_limit_of_a_period_shorter_than_a_second_refills_that_fast"
    ],
    KeepsTheBucketOfADeletedControl: [
        "test_a_deleted_control_holds_nothing_back_and_a_new_one_starts_afresh"
    ],
    HeldBackTasksSpendTheirOtherKeys: [
        "test_a_task_held_back_by_one_of_its_keys_takes_nothing_from_its_others"
    ],
    SpendsOnlyTheFirstBucket: ["test_a_task_with_several_rate_limited_keys_takes_a_token_of_each"],
    LooksAtTheFirstCandidatesOnly: [
        "test_a_claim_reaches_the_free_tasks_behind_any_number_of_held_back_ones"
    ],
    FairGroupsKeepTheirFirstPrefix: [
        "test_a_queue_whose_fair_prefix_changes_is_shared_among_the_new_groups"
    ],
    AgingKeepsItsFirstValue: ["test_a_queue_whose_aging_changes_is_claimed_by_the_new_aging"],
}
"""Each broken store and the kit tests that must fail against it."""
