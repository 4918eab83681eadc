"""Broken stores for what contract versions 3–4 promise of controls that change: read,
changed and written back, refilled or not, deleted, rate periods other than a second, a task
with several limited keys, a deep backlog held back, a fair prefix or an aging changed, and the
validation of a control. Like ``kit_broken_flow``: each a small subclass of the reference memory
store that breaks one promise and passes the clauses the kit had before for control records.
``BROKEN_STORES`` maps it to the kit tests that must fail against it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from datetime import datetime

import msgspec

from kit_broken_scope import claim_gate_of
from kit_broken_stores import _Broken
from rdq.errors import ControlConflict
from rdq.spi import (
    ClaimGate,
    ClaimOrder,
    Control,
)

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
        return claim_gate_of(self._state, queue, now, controls)


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


class ForgetsTheControlState(_Broken):
    """Lists every control without the engine's state."""

    async def _list_controls(self, queue: str | None) -> list[Control]:
        return [msgspec.structs.replace(c, state={}) for c in await super()._list_controls(queue)]


class AcceptsAnyControl(_Broken):
    """Writes a control without checking it."""

    async def put_control(self, control: Control, *, expected_version: int) -> Control:
        return await self._run(self._put_control(control, expected_version))


class AgingOutlivesItsControl(_Broken):
    """Keeps a queue aged by the last aging its control set, once the control no longer
    sets one."""

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        stored = await super()._put_control(control, expected_version)
        if control.aging is not None:
            self._state.__dict__.setdefault("kit_aging", {})[control.queue] = control.aging
        return stored

    def _claim_order(self, queue: str) -> ClaimOrder:
        order = super()._claim_order(queue)
        last = self._state.__dict__.setdefault("kit_aging", {}).get(queue)
        if order.aging is None and last is not None:
            return dataclasses.replace(order, aging=last)
        return order


BROKEN_STORES: dict[type, list[str]] = {
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
    ForgetsTheControlState: ["test_put_control_stores_it_with_version_one_and_the_store_time"],
    AcceptsAnyControl: [
        "test_put_control_with_a_bad_control_raises_validation_error_and_stores_nothing"
    ],
    AgingOutlivesItsControl: ["test_a_queue_without_aging_is_claimed_by_strict_priority_again"],
}
"""Each broken store and the kit tests that must fail against it."""
