"""Broken stores around leases, the storage clock and notifications: each breaks a promise
that a kit without a clause for it let through.

Like ``kit_broken_stores``: each is a small subclass of the reference memory store that
breaks exactly one promise; ``BROKEN_STORES`` maps it to the kit tests that must fail.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime, timedelta

import msgspec

from kit_broken_stores import _Broken
from rdq.errors import StaleClaim
from rdq.spi import Attempt, Capabilities, Claimed, Stats, Status, bounds
from rdq_memory import MemoryStorage
from rdq_memory._state import Record

STATEFUL = "test_random_operation_sequences_keep_the_contract"
LAPSED = "test_a_lapsed_lease_not_yet_reclaimed_is_still_held_by_its_holder"


class RejectsLapsedTokens(_Broken):
    """Treats a lease that lapsed as lost even though nobody reclaimed the task."""

    def _fenced(self, task_id: str, token: str) -> Record:
        record = super()._fenced(task_id, token)
        expires = record.task.lease_expires_at
        if expires is not None and expires <= self._clock_now():
            raise StaleClaim(task_id)
        return record


class ExtendsFromTheOldExpiry(_Broken):
    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        record = self.record(task_id)
        old = record.task.lease_expires_at if record else None
        expires = await super().extend_lease(task_id, token, lease)
        if record is None or old is None:
            return expires
        with self._state.lock:
            record.task.lease_expires_at = old + lease
            record.bump()
            self._state.schedule(record)
        return old + lease


class ResolvesAtTheAttemptsFinishedAt(_Broken):
    """Stamps completed_at / dead_lettered_at with the worker's finished_at."""

    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        await super().complete(task_id, token, attempt)
        record = self.record(task_id)
        if record is not None and attempt.finished_at is not None:
            record.task.completed_at = attempt.finished_at

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        await super().dead_letter(task_id, token, attempt)
        record = self.record(task_id)
        if record is not None and attempt.finished_at is not None:
            with self._state.lock:
                self._state.remove_dead(record.task)
                record.task.dead_lettered_at = attempt.finished_at
                self._state.add_dead(record.task)


class StatsCountLapsedLeasesAsPending(_Broken):
    async def stats(self, queue: str) -> Stats:
        stats = await super().stats(queue)
        with self._state.lock:
            now = self._clock_now()
            lapsed = sum(
                1
                for r in self._state.of_queue(queue)
                if r.task.status == Status.IN_FLIGHT
                and r.task.lease_expires_at is not None
                and r.task.lease_expires_at <= now
            )
        return msgspec.structs.replace(
            stats, pending=stats.pending + lapsed, in_flight=stats.in_flight - lapsed
        )


class RescheduleKeepsOnlyTheLastAttempt(_Broken):
    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        await super().reschedule(task_id, token, attempt, next_at)
        record = self.record(task_id)
        if record is not None:
            record.task.attempts = record.task.attempts[-1:]


class TokensRepeatAfterRedrive(_Broken):
    """Derives the token from the task id and its attempt count, which a redrive resets."""

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        out = []
        for c in await super().claim_due(queue, limit, lease, worker_id=worker_id):
            digest = hashlib.sha256(f"{c.task.id}:{c.task.attempt_count}".encode()).hexdigest()
            record = self.record(c.task.id)
            if record is not None:
                record.token = digest[:32]
            out.append(Claimed(c.task, digest[:32]))
        return out


class _ClaimsByAnotherClock(_Broken):
    """Decides due-ness (and stamps claims) by ``skew(now)``."""

    skew: Callable[[datetime], datetime]

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        real = self._clock
        skew = type(self).skew
        self._clock = lambda: skew(real())
        try:
            return await super().claim_due(queue, limit, lease, worker_id=worker_id)
        finally:
            self._clock = real


class ComparesDueTimesInWholeSeconds(_ClaimsByAnotherClock):
    """Counts a task as due during the whole second its due time falls in."""

    @staticmethod
    def skew(now: datetime) -> datetime:
        return now.replace(microsecond=999_999)


class RoundsDueTimesUp(_ClaimsByAnotherClock):
    """Counts a task as due only from the whole second after its due time."""

    @staticmethod
    def skew(now: datetime) -> datetime:
        return now.replace(microsecond=0)


class WaitDueReturnsFalseAtOnce(_Broken):
    async def wait_due(self, queue: str, timeout: float) -> bool:
        bounds.check_queue(queue)
        return False


class WaitDueAlwaysWakesAtOnce(_Broken):
    async def wait_due(self, queue: str, timeout: float) -> bool:
        bounds.check_queue(queue)
        return True


class LostTheBatchCompleteCapability(_Broken):
    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(super().capabilities(), batch_complete=False)


BROKEN_STORES: dict[type[MemoryStorage], list[str]] = {
    RejectsLapsedTokens: [
        f"{LAPSED}[extend_lease]",
        f"{LAPSED}[complete]",
        f"{LAPSED}[reschedule]",
        f"{LAPSED}[dead_letter]",
        STATEFUL,
    ],
    ExtendsFromTheOldExpiry: [
        "test_extend_lease_sets_the_expiry_to_the_storage_now_plus_the_lease",
        STATEFUL,
    ],
    ResolvesAtTheAttemptsFinishedAt: [
        "test_resolution_times_come_from_the_storage_clock_not_from_the_attempt"
    ],
    StatsCountLapsedLeasesAsPending: [
        "test_stats_counts_a_lapsed_lease_not_yet_reclaimed_as_in_flight",
        STATEFUL,
    ],
    RescheduleKeepsOnlyTheLastAttempt: ["test_a_second_reschedule_keeps_both_attempts_in_order"],
    TokensRepeatAfterRedrive: ["test_a_claim_after_a_redrive_gets_a_token_never_handed_out_before"],
    ComparesDueTimesInWholeSeconds: ["test_due_ness_is_decided_at_microsecond_precision"],
    RoundsDueTimesUp: ["test_due_ness_is_decided_at_microsecond_precision"],
    WaitDueReturnsFalseAtOnce: [
        "test_wait_due_on_a_queue_with_nothing_due_returns_false_once_its_timeout_passed"
    ],
    WaitDueAlwaysWakesAtOnce: [
        "test_wait_due_on_a_queue_with_nothing_due_returns_false_once_its_timeout_passed"
    ],
    LostTheBatchCompleteCapability: ["test_capabilities_are_exactly_the_ones_the_backend_declares"],
}
"""Each broken store and the kit tests that must fail against it."""
