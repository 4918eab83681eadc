"""Atomic transitions: each resolution moves a task to its next state in one step."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from rdq.errors import StaleClaim
from rdq.spi import Attempt, Outcome, Status, Storage
from rdq_compliance._support import (
    LONG_LEASE,
    attempt,
    claim_one,
    claim_time,
    list_whole_dlq,
    new_task,
    snapshot,
)

__all__ = ["TransitionClauses"]


def _full_attempt(number: int, outcome: Outcome, start: datetime) -> Attempt:
    return Attempt(
        number=number,
        outcome=outcome,
        error_type=None if outcome is Outcome.SUCCEEDED else "KitError",
        error_message=None if outcome is Outcome.SUCCEEDED else "it broke",
        started_at=start,
        finished_at=start + timedelta(milliseconds=1500),
        worker_id="kit-worker-1",
    )


class TransitionClauses:
    """``complete``, ``reschedule`` and ``dead_letter`` each append the attempt, count it,
    set the new status and clear the lease in one atomic step; concurrent resolutions with
    one token apply exactly once."""

    @pytest.mark.asyncio
    async def test_atomic_complete_sets_succeeded_appends_the_attempt_and_clears_the_lease(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        done = _full_attempt(1, Outcome.SUCCEEDED, claim_time(claimed, LONG_LEASE))
        await storage.complete(claimed.task.id, claimed.token, done)

        stored = await storage.get(claimed.task.id)
        assert stored.status == Status.SUCCEEDED
        assert stored.attempts == [done]
        assert stored.attempt_count == 1
        assert stored.lease_expires_at is None
        assert stored.completed_at is not None
        assert stored.completed_at >= claim_time(claimed, LONG_LEASE)
        assert stored.dead_lettered_at is None
        assert await storage.claim_due(queue, 5, LONG_LEASE) == []
        stats = await storage.stats(queue)
        assert (stats.pending, stats.in_flight, stats.succeeded, stats.dlq_depth) == (0, 0, 1, 0)

    @pytest.mark.asyncio
    async def test_atomic_reschedule_sets_pending_appends_the_attempt_and_clears_the_lease(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        claimed_at = claim_time(claimed, LONG_LEASE)
        failure = _full_attempt(1, Outcome.FAILED, claimed_at)
        next_at = claimed_at + timedelta(hours=1, microseconds=250)
        await storage.reschedule(claimed.task.id, claimed.token, failure, next_at)

        stored = await storage.get(claimed.task.id)
        assert stored.status == Status.PENDING
        assert stored.next_attempt_at == next_at
        assert stored.attempts == [failure]
        assert stored.attempt_count == 1
        assert stored.lease_expires_at is None
        assert stored.completed_at is None
        assert stored.dead_lettered_at is None
        assert await storage.claim_due(queue, 5, LONG_LEASE) == []
        stats = await storage.stats(queue)
        assert (stats.pending, stats.in_flight, stats.succeeded, stats.dlq_depth) == (1, 0, 0, 0)

    @pytest.mark.asyncio
    async def test_atomic_reschedule_into_the_past_makes_the_task_due_again(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        due_again = claim_time(claimed, LONG_LEASE) - timedelta(seconds=1)
        await storage.reschedule(claimed.task.id, claimed.token, attempt(1), due_again)
        again = await claim_one(storage, queue)
        assert again.task.id == claimed.task.id
        assert again.token != claimed.token
        assert again.task.attempt_count == 1

    @pytest.mark.asyncio
    async def test_atomic_dead_letter_sets_dead_appends_the_attempt_and_clears_the_lease(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        fatal = _full_attempt(1, Outcome.PERMANENT, claim_time(claimed, LONG_LEASE))
        await storage.dead_letter(claimed.task.id, claimed.token, fatal)

        stored = await storage.get(claimed.task.id)
        assert stored.status == Status.DEAD
        assert stored.attempts == [fatal]
        assert stored.attempt_count == 1
        assert stored.lease_expires_at is None
        assert stored.completed_at is None
        assert stored.dead_lettered_at is not None
        assert stored.dead_lettered_at >= claim_time(claimed, LONG_LEASE)
        assert await storage.claim_due(queue, 5, LONG_LEASE) == []
        assert [t.id for t in await list_whole_dlq(storage, queue)] == [claimed.task.id]
        stats = await storage.stats(queue)
        assert (stats.pending, stats.in_flight, stats.succeeded, stats.dlq_depth) == (0, 0, 0, 1)

    @pytest.mark.asyncio
    async def test_atomic_concurrent_resolutions_with_one_token_apply_exactly_once(
        self, storage: Storage, queue: str
    ) -> None:
        for _ in range(5):
            await storage.enqueue(new_task(queue))
        for claimed in await storage.claim_due(queue, 5, LONG_LEASE):
            task_id, token = claimed.task.id, claimed.token
            later = claim_time(claimed, LONG_LEASE) + timedelta(hours=1)
            racers = [
                storage.complete(task_id, token, attempt(1, Outcome.SUCCEEDED)),
                storage.reschedule(task_id, token, attempt(1), later),
                storage.dead_letter(task_id, token, attempt(1, Outcome.PERMANENT)),
                storage.complete(task_id, token, attempt(1, Outcome.SUCCEEDED)),
                storage.reschedule(task_id, token, attempt(1), later),
            ]
            results = await asyncio.gather(*racers, return_exceptions=True)
            applied = [r for r in results if not isinstance(r, BaseException)]
            unexpected = [
                r for r in results if isinstance(r, BaseException) and not isinstance(r, StaleClaim)
            ]
            assert not unexpected, f"losers must raise StaleClaim, got {unexpected!r}"
            assert len(applied) == 1, f"{len(applied)} resolutions applied with one token"
            stored = await storage.get(task_id)
            assert stored.attempt_count == 1
            assert len(stored.attempts) == 1
            assert stored.status in (Status.SUCCEEDED, Status.PENDING, Status.DEAD)

    @pytest.mark.asyncio
    async def test_extend_lease_sets_the_expiry_to_the_storage_now_plus_the_lease(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        lease = timedelta(minutes=3)
        before = await storage.now()
        expires = await storage.extend_lease(claimed.task.id, claimed.token, lease)
        after = await storage.now()
        assert before + lease <= expires <= after + lease, (
            f"extend_lease must set now + lease (between {before + lease} and {after + lease}), "
            f"not the old expiry + lease: got {expires}"
        )
        assert (await storage.get(claimed.task.id)).lease_expires_at == expires

    @pytest.mark.asyncio
    async def test_resolution_times_come_from_the_storage_clock_not_from_the_attempt(
        self, storage: Storage, queue: str
    ) -> None:
        for _ in range(4):
            await storage.enqueue(new_task(queue))
        claims = await storage.claim_due(queue, 4, LONG_LEASE)
        absurd = [datetime(2001, 2, 3, tzinfo=UTC), datetime(2999, 4, 5, tzinfo=UTC)]
        before = await storage.now()
        for n, claimed in enumerate(claims):
            when = absurd[n % 2]
            record = Attempt(
                number=1,
                outcome=Outcome.SUCCEEDED if n < 2 else Outcome.PERMANENT,
                started_at=when,
                finished_at=when,
                worker_id="kit-worker-with-a-wrong-clock",
            )
            if n < 2:
                await storage.complete(claimed.task.id, claimed.token, record)
            else:
                await storage.dead_letter(claimed.task.id, claimed.token, record)
        after = await storage.now()
        for n, claimed in enumerate(claims):
            stored = await storage.get(claimed.task.id)
            at = stored.completed_at if n < 2 else stored.dead_lettered_at
            assert at is not None and before <= at <= after, (
                f"{stored.status} at {at}: resolution times are the store's now "
                f"(between {before} and {after}), never the attempt's finished_at"
            )
            assert stored.attempts[-1].finished_at == absurd[n % 2], "the attempt is unchanged"

    @pytest.mark.asyncio
    async def test_a_second_reschedule_keeps_both_attempts_in_order(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        records = []
        for number in (1, 2):
            claimed = await claim_one(storage, queue)
            record = attempt(number, error_message=f"failure {number}")
            due_again = claim_time(claimed, LONG_LEASE) - timedelta(seconds=1)
            await storage.reschedule(claimed.task.id, claimed.token, record, due_again)
            records.append(record)
        stored = await storage.get(claimed.task.id)
        assert stored.attempts == records, "every reschedule appends; none overwrites"
        assert stored.attempt_count == 2

    @pytest.mark.asyncio
    async def test_atomic_extend_lease_changes_only_the_lease(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        before = snapshot(await storage.get(claimed.task.id))
        lease = timedelta(minutes=20)
        expires = await storage.extend_lease(claimed.task.id, claimed.token, lease)
        assert isinstance(expires, datetime)
        assert expires.utcoffset() == timedelta(0), "timestamps are timezone-aware UTC"
        after = snapshot(await storage.get(claimed.task.id))
        assert after.pop("lease_expires_at") is not None
        before.pop("lease_expires_at")
        assert after == before
        assert (await storage.get(claimed.task.id)).lease_expires_at == expires
        # the same token still holds the extended lease
        await storage.complete(claimed.task.id, claimed.token, attempt(1, Outcome.SUCCEEDED))
