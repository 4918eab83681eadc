"""Deliberately broken stores, each a small subclass of the reference memory store that
breaks exactly one clause of the contract.

``BROKEN_STORES`` maps each one to the kit tests that must fail against it: the test named
for the clause it breaks, and where it applies the Hypothesis state machine too.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import msgspec

from rdq.errors import NotFound, StaleClaim, StaleCursor, ValidationError
from rdq.spi import (
    Attempt,
    Claimed,
    Completion,
    DLQCursor,
    DLQFilter,
    Envelope,
    Outcome,
    Page,
    Selector,
    Stats,
    Status,
    bounds,
)
from rdq_memory import MemoryStorage
from rdq_memory._state import Record

STATEFUL = "test_random_operation_sequences_keep_the_contract"


def _copy(task: Envelope) -> Envelope:
    return msgspec.structs.replace(task, attempts=list(task.attempts), extra=dict(task.extra))


class _Broken(MemoryStorage):
    """Shared plumbing: reach into the reference store's records."""

    def record(self, task_id: str) -> Record | None:
        return self._state.tasks.get(task_id)

    def current_token(self, task_id: str, token: str) -> str:
        """The task's current token if it has one (so the real fencing check passes)."""
        record = self.record(task_id)
        return record.token if record is not None and record.token else token


# --- the envelope --------------------------------------------------------------------------


class KnowsOnlyTheOutcomesOfVersionOne(_Broken):
    """Files an attempt whose outcome it does not know (DEFERRED, SNOOZED) as FAILED."""

    KNOWN = frozenset(
        {
            Outcome.SUCCEEDED,
            Outcome.FAILED,
            Outcome.TIMEOUT,
            Outcome.PERMANENT,
            Outcome.LEASE_EXPIRED,
            Outcome.INTERRUPTED,
        }
    )

    async def _reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        if attempt.outcome not in self.KNOWN:
            attempt = msgspec.structs.replace(attempt, outcome=Outcome.FAILED)
        await super()._reschedule(task_id, token, attempt, next_at)


# --- fencing -------------------------------------------------------------------------------


class IgnoresTokensOnExtendLease(_Broken):
    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        return await super().extend_lease(task_id, self.current_token(task_id, token), lease)


class IgnoresTokensOnReschedule(_Broken):
    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        await super().reschedule(task_id, self.current_token(task_id, token), attempt, next_at)


class IgnoresTokensOnComplete(_Broken):
    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        await super().complete(task_id, self.current_token(task_id, token), attempt)


class IgnoresTokensOnDeadLetter(_Broken):
    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        await super().dead_letter(task_id, self.current_token(task_id, token), attempt)


class IgnoresTokensInCompleteMany(_Broken):
    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        return await super().complete_many(
            [
                Completion(c.task_id, self.current_token(c.task_id, c.token), c.attempt)
                for c in completions
            ]
        )


# --- claiming ------------------------------------------------------------------------------


class HandsOutLeasedTasksAgain(_Broken):
    """Tops up every claim with tasks another claimant still holds a valid lease on."""

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        claimed = await super().claim_due(queue, limit, lease, worker_id=worker_id)
        now = self._clock_now()
        taken = {c.task.id for c in claimed}
        for record in list(self._state.tasks.values()):
            task = record.task
            if len(claimed) >= limit:
                break
            if (
                task.queue == queue
                and task.id not in taken
                and task.status == Status.IN_FLIGHT
                and record.token is not None
                and task.lease_expires_at is not None
                and task.lease_expires_at > now
            ):
                claimed.append(Claimed(_copy(task), record.token))
        return claimed


class ClaimsNewestFirst(_Broken):
    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        bounds.check_queue(queue)
        bounds.check_limit(limit)
        bounds.check_lease(lease)
        now = self._clock_now()
        due = [
            r
            for r in self._state.tasks.values()
            if r.task.queue == queue
            and r.task.status == Status.PENDING
            and r.task.next_attempt_at is not None
            and r.task.next_attempt_at <= now
        ]
        due.sort(key=lambda r: r.task.next_attempt_at or now, reverse=True)
        out = []
        for record in due[:limit]:
            record.task.status = Status.IN_FLIGHT
            record.task.lease_expires_at = now + lease
            record.token = secrets.token_hex(8)
            record.task.claimed_at = now
            record.task.claimed_by = worker_id
            record.bump()
            self._state.schedule(record)
            out.append(Claimed(_copy(record.task), record.token))
        return out


class IgnoresLimit(_Broken):
    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        bounds.check_limit(limit)
        return await super().claim_due(
            queue, min(limit + 1, bounds.MAX_LIMIT), lease, worker_id=worker_id
        )


class ClaimsTasksBeforeTheyAreDue(_Broken):
    """Decides due-ness by a clock two days fast (as if it trusted a skewed caller)."""

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        real = self._clock
        self._clock = lambda: real() + timedelta(days=2)
        try:
            return await super().claim_due(queue, limit, lease, worker_id=worker_id)
        finally:
            self._clock = real


# --- lease recovery ------------------------------------------------------------------------


def _reclaim_records(claimed: list[Claimed], lease: timedelta) -> list[Claimed]:
    """The claims that were reclaims of lapsed leases (their last record is this claim's)."""
    out = []
    for c in claimed:
        last = c.task.attempts[-1] if c.task.attempts else None
        expires = c.task.lease_expires_at
        if (
            last is not None
            and last.outcome == Outcome.LEASE_EXPIRED
            and expires is not None
            and last.finished_at == expires - lease
        ):
            out.append(c)
    return out


class ForgetsTheLeaseExpiredRecord(_Broken):
    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        claimed = await super().claim_due(queue, limit, lease, worker_id=worker_id)
        for c in _reclaim_records(claimed, lease):
            record = self.record(c.task.id)
            assert record is not None
            record.task.attempts.pop()
            record.task.attempt_count -= 1
            c.task.attempts.pop()
            c.task.attempt_count -= 1
        return claimed


class WritesTheLeaseExpiredRecordAfterTheReclaim(_Broken):
    """Hands out the reclaimed task before its LEASE_EXPIRED record is part of it."""

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        claimed = await super().claim_due(queue, limit, lease, worker_id=worker_id)
        for c in _reclaim_records(claimed, lease):
            c.task.attempts.pop()
            c.task.attempt_count -= 1
        return claimed


# --- atomic transitions ---------------------------------------------------------------------


class ResolvesWithoutHoldingTheTask(_Broken):
    """Checks the token, lets other work run, then applies the resolution unconditionally."""

    async def _check_then_apply(
        self, task_id: str, token: str, attempt: Attempt, status: Status
    ) -> None:
        record = self.record(task_id)
        if record is None or record.token != token:
            raise StaleClaim(task_id)
        await asyncio.sleep(0)
        task = record.task
        task.attempts.append(attempt)
        task.attempt_count += 1
        task.status = status
        task.lease_expires_at = None
        record.token = None
        record.bump()
        if status == Status.DEAD:
            task.dead_lettered_at = self._clock_now()
            self._state.add_dead(task)
        elif status == Status.SUCCEEDED:
            task.completed_at = self._clock_now()

    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._check_then_apply(task_id, token, attempt, Status.SUCCEEDED)

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._check_then_apply(task_id, token, attempt, Status.DEAD)


class CompleteKeepsTheLease(_Broken):
    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        record = self.record(task_id)
        lease = record.task.lease_expires_at if record else None
        await super().complete(task_id, token, attempt)
        if record is not None:
            record.task.lease_expires_at = lease


class DeadLetterLosesTheAttempt(_Broken):
    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        await super().dead_letter(task_id, token, attempt)
        record = self.record(task_id)
        assert record is not None
        record.task.attempts.pop()


class RescheduleIgnoresNextAt(_Broken):
    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        bounds.check_aware(next_at, "next_at")
        await super().reschedule(task_id, token, attempt, self._clock_now())


# --- admission -----------------------------------------------------------------------------


class OverwritesOnReenqueue(_Broken):
    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        record = self.record(task.id)
        if record is not None and record.task.queue == task.queue:
            self._state.delete(record)
        return await super().enqueue(task, delay=delay)


class AcceptsTheSameIdInAnotherQueue(_Broken):
    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        record = self.record(task.id)
        if record is not None and record.task.queue != task.queue:
            return False
        return await super().enqueue(task, delay=delay)


class StoresInvalidTasksBeforeCheckingThem(_Broken):
    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        try:
            bounds.check_task(task)
        except Exception:
            if self.record(task.id) is None:  # keep what fits, then complain
                kept = msgspec.structs.replace(task, payload=None, headers={}, extra={})
                await super().enqueue(kept)
            raise
        return await super().enqueue(task, delay=delay)


# --- round trip ----------------------------------------------------------------------------


class DropsUnknownFields(_Broken):
    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        return await super().enqueue(msgspec.structs.replace(task, extra={}), delay=delay)


class TruncatesTimestampsToMilliseconds(_Broken):
    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        at = task.next_attempt_at
        if at is not None:
            at = at.replace(microsecond=at.microsecond // 1000 * 1000)
        return await super().enqueue(msgspec.structs.replace(task, next_attempt_at=at), delay=delay)


# --- redrive and purge ---------------------------------------------------------------------


class RedriveKeepsAttemptCount(_Broken):
    async def redrive(self, queue: str, selector: Selector) -> int:
        counts = {i: r.task.attempt_count for i, r in self._state.tasks.items()}
        redriven = await super().redrive(queue, selector)
        for task_id, count in counts.items():
            record = self.record(task_id)
            if record is not None:
                record.task.attempt_count = count
        return redriven


class RedriveDropsHistory(_Broken):
    async def redrive(self, queue: str, selector: Selector) -> int:
        dead = {i for i, r in self._state.tasks.items() if r.task.status == Status.DEAD}
        redriven = await super().redrive(queue, selector)
        for task_id in dead:
            record = self.record(task_id)
            if record is not None and record.task.status == Status.PENDING:
                record.task.attempts = []
        return redriven


class RedriveTouchesLiveTasks(_Broken):
    """Also "redrives" listed tasks that are not DEAD (any status, any queue)."""

    async def redrive(self, queue: str, selector: Selector) -> int:
        extra = 0
        for task_id in dict.fromkeys(selector.ids or []):
            record = self.record(task_id)
            if record is not None and record.task.status != Status.DEAD:
                record.task.redrive_count += 1
                record.task.attempt_count = 0
                extra += 1
        return extra + await super().redrive(queue, selector)


class PurgeDeletesLiveTasks(_Broken):
    async def purge(self, queue: str, selector: Selector) -> int:
        extra = 0
        for task_id in dict.fromkeys(selector.ids or []):
            record = self.record(task_id)
            if record is not None and record.task.status != Status.DEAD:
                self._state.delete(record)
                extra += 1
        return extra + await super().purge(queue, selector)


# --- the DLQ listing ----------------------------------------------------------------------


@dataclass
class _Offset:
    queue: str
    offset: int


class PaginatesByOffset(_Broken):
    """Pages by position instead of by key: entries taken away shift the next page."""

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        bounds.check_queue(queue)
        bounds.check_page(page)
        offset = 0
        if page.cursor is not None:
            try:
                raw = base64.urlsafe_b64decode(page.cursor.encode())
                cursor = msgspec.json.decode(raw, type=_Offset)
            except (ValueError, msgspec.DecodeError):
                raise StaleCursor("malformed") from None
            if cursor.queue != queue:
                raise StaleCursor("another queue")
            offset = cursor.offset
        everything, _ = await super().dlq_list(
            queue, dlq_filter, Page(limit=bounds.MAX_LIMIT, include_attempts=page.include_attempts)
        )
        chunk = everything[offset : offset + page.limit]
        more = offset + page.limit < len(everything)
        token = _Offset(queue, offset + page.limit)
        return chunk, base64.urlsafe_b64encode(
            msgspec.json.encode(token)
        ).decode() if more else None


class AcceptsAnyCursor(_Broken):
    """Starts over from the first page when it cannot read a cursor."""

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        try:
            return await super().dlq_list(queue, dlq_filter, page)
        except StaleCursor:
            return await super().dlq_list(
                queue, dlq_filter, msgspec.structs.replace(page, cursor=None)
            )


class CursorsIgnoreTheirQueue(_Broken):
    """Accepts a cursor minted for another queue, reading only its position."""

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        if page.cursor is not None:
            try:
                raw = base64.urlsafe_b64decode(page.cursor + "=" * (-len(page.cursor) % 4))
                cursor = msgspec.json.decode(raw, type=DLQCursor)
            except (ValueError, msgspec.DecodeError):
                pass
            else:
                mine = DLQCursor.after(queue, dlq_filter, cursor.dead_lettered_at, cursor.id)
                page = msgspec.structs.replace(page, cursor=mine.encode())
        return await super().dlq_list(queue, dlq_filter, page)


class ListsAttemptsUnasked(_Broken):
    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        page = msgspec.structs.replace(page, include_attempts=True)
        return await super().dlq_list(queue, dlq_filter, page)


# --- operations ----------------------------------------------------------------------------


class PurgeSucceededIgnoresTheCutoff(_Broken):
    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        bounds.check_aware(older_than, "older_than")
        return await super().purge_succeeded(queue, datetime.max.replace(tzinfo=UTC))


class StatsCountsDeadTasksAsPending(_Broken):
    async def stats(self, queue: str) -> Stats:
        stats = await super().stats(queue)
        return msgspec.structs.replace(stats, pending=stats.pending + stats.dlq_depth)


# --- capabilities --------------------------------------------------------------------------


class WaitDueNeverWakes(_Broken):
    async def wait_due(self, queue: str, timeout: float) -> bool:
        bounds.check_queue(queue)
        return False


class BatchAdmitsTheTasksBeforeAConflict(_Broken):
    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        return [await self.enqueue(task, delay=delay) for task in tasks]


# --- more single-clause breakages ------------------------------------------------------------


class ReusesTheTokenOnReclaim(_Broken):
    """Hands a reclaimed task out under its previous (now shared) token."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens: dict[str, str] = {}

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        claimed = []
        for c in await super().claim_due(queue, limit, lease, worker_id=worker_id):
            token = self.tokens.setdefault(c.task.id, c.token)
            record = self.record(c.task.id)
            assert record is not None
            record.token = token
            claimed.append(Claimed(c.task, token))
        return claimed


class ExtendLeaseKeepsTheOldExpiry(_Broken):
    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        record = self.record(task_id)
        old = record.task.lease_expires_at if record else None
        expires = await super().extend_lease(task_id, token, lease)
        if record is not None and old is not None:
            record.task.lease_expires_at = old
            record.bump()
            self._state.schedule(record)
        return expires


class RedrivenTasksAreNotDue(_Broken):
    async def redrive(self, queue: str, selector: Selector) -> int:
        dead = {i for i, r in self._state.tasks.items() if r.task.status == Status.DEAD}
        redriven = await super().redrive(queue, selector)
        for task_id in dead:
            record = self.record(task_id)
            if record is not None and record.task.status == Status.PENDING:
                record.task.next_attempt_at = self._clock_now() + timedelta(hours=1)
                record.bump()
                self._state.schedule(record)
        return redriven


class FilterIgnoresErrorType(_Broken):
    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        if dlq_filter is not None:
            dlq_filter = msgspec.structs.replace(dlq_filter, error_type=None)
        return await super().dlq_list(queue, dlq_filter, page)


class DeadLetteredBeforeIsInclusive(_Broken):
    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        if dlq_filter is not None and dlq_filter.dead_lettered_before is not None:
            bound = dlq_filter.dead_lettered_before + timedelta(microseconds=1)
            dlq_filter = msgspec.structs.replace(dlq_filter, dead_lettered_before=bound)
        return await super().dlq_list(queue, dlq_filter, page)


class LastPageStillHasACursor(_Broken):
    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        tasks, cursor = await super().dlq_list(queue, dlq_filter, page)
        if cursor is None and tasks and len(tasks) == page.limit:
            last = tasks[-1]
            assert last.dead_lettered_at is not None
            cursor = DLQCursor.after(queue, dlq_filter, last.dead_lettered_at, last.id).encode()
        return tasks, cursor


class StatsAgesPendingTasksFromCreatedAt(_Broken):
    async def stats(self, queue: str) -> Stats:
        stats = await super().stats(queue)
        if stats.oldest_pending_age is None:
            return stats
        created = [
            r.task.created_at
            for r in self._state.tasks.values()
            if r.task.queue == queue and r.task.status == Status.PENDING and r.task.created_at
        ]
        age = (stats.as_of - min(created)).total_seconds()
        return msgspec.structs.replace(stats, oldest_pending_age=age)


class ClaimsWithoutHoldingTheTasks(_Broken):
    """Picks the due tasks, lets other claimants run, then marks them claimed regardless."""

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        bounds.check_queue(queue)
        bounds.check_limit(limit)
        bounds.check_lease(lease)
        now = self._clock_now()
        due = sorted(
            (
                r
                for r in self._state.tasks.values()
                if r.task.queue == queue
                and r.task.status == Status.PENDING
                and r.task.next_attempt_at is not None
                and r.task.next_attempt_at <= now
            ),
            key=lambda r: r.task.next_attempt_at or now,
        )[:limit]
        await asyncio.sleep(0)
        out = []
        for record in due:
            record.task.status = Status.IN_FLIGHT
            record.task.lease_expires_at = now + lease
            record.task.claimed_at = now
            record.task.claimed_by = worker_id
            record.token = secrets.token_hex(8)
            record.bump()
            self._state.schedule(record)
            out.append(Claimed(_copy(record.task), record.token))
        return out


class ClaimsAcrossQueues(_Broken):
    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        claimed = await super().claim_due(queue, limit, lease, worker_id=worker_id)
        for other in list(self._state.queues):
            if len(claimed) >= limit:
                break
            if other != queue:
                claimed += await super().claim_due(
                    other, limit - len(claimed), lease, worker_id=worker_id
                )
        return claimed


class TrustsTheCallersCreatedAt(_Broken):
    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        stored = await super().enqueue(task, delay=delay)
        record = self.record(task.id)
        if stored and record is not None and task.created_at is not None:
            record.task.created_at = task.created_at
        return stored


class IgnoresDelay(_Broken):
    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        return await super().enqueue(task)


class ValidationErrorsNameNoField(_Broken):
    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        try:
            return await super().enqueue(task, delay=delay)
        except ValidationError as exc:
            raise ValidationError(exc.message) from None


class UnknownTasksLookStale(_Broken):
    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        if self.record(task_id) is None:
            raise StaleClaim(task_id)
        await super().complete(task_id, token, attempt)


class BatchStoresTheValidTasksBeforeTheInvalidOne(_Broken):
    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        flags = []
        for task in tasks:
            flags.append(await self.enqueue(task, delay=delay))
        return flags


BROKEN_STORES: dict[type[MemoryStorage], list[str]] = {
    KnowsOnlyTheOutcomesOfVersionOne: ["test_round_trip_keeps_every_outcome_the_contract_names"],
    IgnoresTokensOnExtendLease: ["test_fencing_stale_token_on_extend_lease_changes_nothing"],
    IgnoresTokensOnReschedule: ["test_fencing_stale_token_on_reschedule_changes_nothing"],
    IgnoresTokensOnComplete: ["test_fencing_stale_token_on_complete_changes_nothing", STATEFUL],
    IgnoresTokensOnDeadLetter: ["test_fencing_stale_token_on_dead_letter_changes_nothing"],
    IgnoresTokensInCompleteMany: [
        "test_complete_many_fences_each_item_on_its_own_token",
        "test_complete_many_with_a_reclaimed_token_is_stale_and_the_new_holder_keeps_it",
    ],
    HandsOutLeasedTasksAgain: [
        "test_no_double_claim_under_concurrent_claimants",
        "test_no_overlapping_leases_when_expired_leases_are_reclaimed",
        "test_claim_skips_tasks_with_a_valid_lease",
        STATEFUL,
    ],
    ClaimsNewestFirst: ["test_claim_order_is_oldest_due_first"],
    IgnoresLimit: ["test_claim_due_honours_limit", STATEFUL],
    ClaimsTasksBeforeTheyAreDue: ["test_claim_skips_tasks_not_yet_due_by_the_storage_clock"],
    ForgetsTheLeaseExpiredRecord: [
        "test_lease_recovery_appends_lease_expired_atomically_with_the_reclaim"
    ],
    WritesTheLeaseExpiredRecordAfterTheReclaim: [
        "test_lease_recovery_appends_lease_expired_atomically_with_the_reclaim"
    ],
    ResolvesWithoutHoldingTheTask: [
        "test_atomic_concurrent_resolutions_with_one_token_apply_exactly_once"
    ],
    CompleteKeepsTheLease: [
        "test_atomic_complete_sets_succeeded_appends_the_attempt_and_clears_the_lease",
        STATEFUL,
    ],
    DeadLetterLosesTheAttempt: [
        "test_atomic_dead_letter_sets_dead_appends_the_attempt_and_clears_the_lease",
        STATEFUL,
    ],
    RescheduleIgnoresNextAt: [
        "test_atomic_reschedule_sets_pending_appends_the_attempt_and_clears_the_lease",
        STATEFUL,
    ],
    OverwritesOnReenqueue: ["test_enqueue_is_idempotent_within_a_queue", STATEFUL],
    AcceptsTheSameIdInAnotherQueue: [
        "test_enqueue_same_id_in_another_queue_raises_id_conflict",
        STATEFUL,
    ],
    StoresInvalidTasksBeforeCheckingThem: [
        "test_enqueue_with_an_invalid_task_raises_validation_error_and_stores_nothing"
        "[payload-too-large]"
    ],
    DropsUnknownFields: ["test_round_trip_keeps_unknown_fields"],
    TruncatesTimestampsToMilliseconds: ["test_round_trip_keeps_microsecond_timestamps"],
    RedriveKeepsAttemptCount: ["test_redrive_resets_attempt_count_and_keeps_history", STATEFUL],
    RedriveDropsHistory: ["test_redrive_resets_attempt_count_and_keeps_history"],
    RedriveTouchesLiveTasks: [
        "test_redrive_ignores_tasks_that_are_not_dead_in_the_queue",
        STATEFUL,
    ],
    PurgeDeletesLiveTasks: ["test_purge_ignores_tasks_that_are_not_dead_in_the_queue", STATEFUL],
    PaginatesByOffset: ["test_dlq_pagination_never_skips_or_repeats_while_entries_are_added"],
    AcceptsAnyCursor: ["test_dlq_list_with_a_malformed_cursor_raises_stale_cursor"],
    CursorsIgnoreTheirQueue: ["test_dlq_list_with_a_cursor_of_another_queue_raises_stale_cursor"],
    ListsAttemptsUnasked: ["test_dlq_list_omits_attempts_unless_asked", STATEFUL],
    PurgeSucceededIgnoresTheCutoff: [
        "test_purge_succeeded_deletes_only_tasks_completed_before_older_than"
    ],
    StatsCountsDeadTasksAsPending: ["test_stats_counts_each_status_of_the_queue", STATEFUL],
    WaitDueNeverWakes: ["test_wait_due_wakes_when_a_task_is_enqueued"],
    BatchAdmitsTheTasksBeforeAConflict: ["test_enqueue_batch_with_an_id_conflict_admits_none"],
    ReusesTheTokenOnReclaim: [
        "test_fencing_stale_token_on_complete_changes_nothing",
        "test_claim_gives_a_new_token_to_each_claim_of_the_same_task",
    ],
    ExtendLeaseKeepsTheOldExpiry: ["test_extended_lease_is_not_reclaimed"],
    RedrivenTasksAreNotDue: ["test_redriven_task_is_due_now"],
    FilterIgnoresErrorType: ["test_dlq_filter_by_error_type"],
    DeadLetteredBeforeIsInclusive: ["test_dlq_filter_dead_lettered_before_is_exclusive"],
    LastPageStillHasACursor: ["test_dlq_list_last_page_has_no_cursor"],
    StatsAgesPendingTasksFromCreatedAt: [
        "test_stats_oldest_pending_age_is_measured_by_the_storage_clock"
    ],
    ClaimsWithoutHoldingTheTasks: ["test_no_double_claim_under_concurrent_claimants"],
    ClaimsAcrossQueues: ["test_claim_never_takes_tasks_of_another_queue"],
    TrustsTheCallersCreatedAt: ["test_enqueue_sets_the_fields_the_store_owns"],
    IgnoresDelay: ["test_enqueue_with_delay_makes_the_task_due_at_created_at_plus_delay"],
    ValidationErrorsNameNoField: [
        "test_enqueue_with_an_invalid_task_raises_validation_error_and_stores_nothing[empty-id]"
    ],
    UnknownTasksLookStale: ["test_mutations_of_an_unknown_id_raise_not_found"],
    BatchStoresTheValidTasksBeforeTheInvalidOne: [
        "test_enqueue_batch_with_an_invalid_task_admits_none"
    ],
}
"""Each broken store and the kit tests that must fail against it."""
