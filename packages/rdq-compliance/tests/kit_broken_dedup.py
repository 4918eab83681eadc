"""Broken stores for the clauses of contract version 5's dedup keys (``admit``).

Each is the reference memory store's ``admit`` with one rule bent (a flag of
:class:`_BentAdmit`, read by one copy of the rule below), or a small override;
``BROKEN_STORES`` maps each to the kit tests that must fail.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import msgspec

from kit_broken_stores import _Broken
from rdq.errors import DedupConflict
from rdq.spi import AdmitOutcome, Admitted, Dedup, DedupMode, Envelope, Selector, Status
from rdq_memory._state import DedupHold, Record


class _BentAdmit(_Broken):
    """The reference rule, with switches to bend one part of it."""

    racy = False
    """Decide, let other admissions run, then act on the stale decision."""
    keys_per_queue = False
    """A key of another queue is another key (no DedupConflict)."""
    ignore_window = False
    """Every key is held while its task is live, whatever the window."""
    held_for_ever = False
    """A key once given is never free again (not even once its task is gone)."""
    extend_in_name_only = False
    """``extend`` answers extended and leaves the window as it was."""
    replace_any_status = False
    """``replace`` and ``debounce`` change a holder that was already claimed."""
    replace_moves_due = False
    """``replace`` makes the holder due now."""
    no_max_age = False
    """``debounce`` pushes the due time without the max_age cap."""
    key_before_id = False
    """The key is decided before the id: a known id under a free key answers added."""

    def _hold_of(self, key: str, queue: str) -> DedupHold | None:
        state = self._state
        if self.keys_per_queue:
            return state.dedup.get(f"{queue}\x00{key}")
        return state.dedup.get(key)

    def _holder(self, hold: DedupHold | None, now: datetime) -> Record | None:
        if hold is None:
            return None
        record = self._state.tasks.get(hold.task_id)
        if self.held_for_ever:
            return record or Record(Envelope(id=hold.task_id, queue=hold.queue, handler_ref="h"))
        if record is None:
            return None
        if hold.until is not None and not self.ignore_window:
            return record if hold.until > now else None
        return record if record.task.status in (Status.PENDING, Status.IN_FLIGHT) else None

    async def _admit(self, task: Envelope, dedup: Dedup, delay: timedelta | None) -> Admitted:
        state = self._state
        key = f"{task.queue}\x00{dedup.key}" if self.keys_per_queue else dedup.key
        with state.lock:
            now = self._clock_now()
            known = task.id in state.tasks
            if known and not self.key_before_id:
                state.admissible([task])
                return Admitted(outcome=AdmitOutcome.SKIPPED, task_id=task.id, queue=task.queue)
            hold = self._hold_of(dedup.key, task.queue)
            holder = self._holder(hold, now)
        if self.racy:
            await asyncio.sleep(0.01)
        with state.lock:
            if hold is None or holder is None:
                await self._enqueue_batch([task], delay)
                until = now + timedelta(seconds=dedup.window) if dedup.window else None
                state.dedup[key] = DedupHold(task.id, task.queue, until)
                state.dedup_of[task.id] = key
                return Admitted(outcome=AdmitOutcome.ADDED, task_id=task.id, queue=task.queue)
            if hold.queue != task.queue:
                raise DedupConflict(dedup.key, hold.queue, hold.task_id)
            held = Admitted(outcome=AdmitOutcome.SKIPPED, task_id=hold.task_id, queue=hold.queue)
            if dedup.mode == DedupMode.EXTEND and dedup.window:
                if not self.extend_in_name_only:
                    hold.until = now + timedelta(seconds=dedup.window)
                return msgspec.structs.replace(held, outcome=AdmitOutcome.EXTENDED)
            if dedup.mode in (DedupMode.REPLACE, DedupMode.DEBOUNCE):
                if holder.task.status != Status.PENDING and not self.replace_any_status:
                    return held
                holder.task.payload = task.payload
                holder.task.headers = dict(task.headers)
                due = None
                if dedup.mode == DedupMode.DEBOUNCE:
                    due = task.next_attempt_at or now + (delay or timedelta(0))
                    if not self.no_max_age:
                        latest = (holder.task.created_at or now) + timedelta(
                            seconds=dedup.max_age or 0
                        )
                        due = max(now, min(due, latest))
                elif self.replace_moves_due:
                    due = now
                if due is not None and holder.task.status == Status.PENDING:
                    holder.task.next_attempt_at = due
                    holder.bump()
                    state.schedule(holder)
                return msgspec.structs.replace(held, outcome=AdmitOutcome.REPLACED)
            return held


class AdmitsEveryTask(_Broken):
    """Ignores the key: every submission is added."""

    async def _admit(self, task: Envelope, dedup: Dedup, delay: timedelta | None) -> Admitted:
        stored = await self._enqueue_batch([task], delay)
        outcome = AdmitOutcome.ADDED if stored[0] else AdmitOutcome.SKIPPED
        return Admitted(outcome=outcome, task_id=task.id, queue=task.queue)


class DecidesThenActsLater(_BentAdmit):
    racy = True


class ScopesKeysPerQueue(_BentAdmit):
    keys_per_queue = True


class IgnoresTheWindow(_BentAdmit):
    ignore_window = True


class HoldsKeysForEver(_BentAdmit):
    held_for_ever = True


class ExtendsInNameOnly(_BentAdmit):
    extend_in_name_only = True


class ReplacesClaimedHolders(_BentAdmit):
    replace_any_status = True


class ReplaceMovesTheDueTime(_BentAdmit):
    replace_moves_due = True


class DebouncesWithoutMaxAge(_BentAdmit):
    no_max_age = True


class DecidesTheKeyBeforeTheId(_BentAdmit):
    key_before_id = True


class AdmitsWithoutCheckingTheDedup(_BentAdmit):
    """Takes any Dedup: an extend without a window is a skip, a debounce without max_age
    waits as long as asked."""

    async def admit(  # type: ignore[override]
        self, task: Envelope, dedup: Dedup, *, delay: timedelta | None = None
    ) -> Admitted:
        return await self._admit(task, dedup, delay)


class PurgeKeepsTheKey(_BentAdmit):
    """A purged task's key stays held: the purge leaves its hold, and a hold whose task is
    gone still counts."""

    held_for_ever = True

    async def _purge(self, queue: str, selector: Selector) -> int:
        state = self._state
        with state.lock:
            kept = dict(state.dedup)
            purged = await super()._purge(queue, selector)
            state.dedup.update(kept)
            return purged


BROKEN_STORES: dict[type, list[str]] = {
    AdmitsEveryTask: [
        "test_admit_adds_a_task_and_a_second_submission_of_its_key_is_skipped",
        "test_concurrent_admissions_of_one_key_leave_exactly_one_live_task",
    ],
    DecidesThenActsLater: [
        "test_concurrent_admissions_of_one_key_leave_exactly_one_live_task",
        "test_concurrent_admissions_from_two_stores_leave_exactly_one_live_task",
    ],
    ScopesKeysPerQueue: [
        "test_a_key_held_in_another_queue_raises_dedup_conflict_and_stores_nothing"
    ],
    IgnoresTheWindow: ["test_with_a_window_a_key_is_held_until_it_passes_whatever_its_task_did"],
    HoldsKeysForEver: [
        "test_without_a_window_a_key_is_held_while_its_task_is_live_and_free_after",
        "test_a_key_freed_in_one_queue_may_be_taken_in_another",
    ],
    ExtendsInNameOnly: ["test_extend_starts_the_window_again"],
    ReplacesClaimedHolders: ["test_replace_leaves_a_holder_that_was_claimed_alone"],
    ReplaceMovesTheDueTime: [
        "test_replace_puts_the_payload_and_headers_into_a_pending_holder_and_keeps_its_due"
    ],
    DebouncesWithoutMaxAge: [
        "test_debounce_moves_the_holders_due_time_but_never_past_its_max_age",
        "test_debounce_past_the_max_age_makes_the_holder_due_now",
    ],
    DecidesTheKeyBeforeTheId: ["test_admit_is_idempotent_by_id_before_anything_else"],
    AdmitsWithoutCheckingTheDedup: [
        "test_admit_with_a_bad_dedup_raises_validation_error_and_stores_nothing"
    ],
    PurgeKeepsTheKey: ["test_a_key_whose_task_was_purged_or_expired_is_free"],
}
