"""Lease recovery: a lapsed lease is reclaimed with a ``LEASE_EXPIRED`` record, in the same
atomic step, and counted as an attempt."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import pytest

from rdq.spi import Claimed, Outcome, Status, Storage
from rdq_compliance._support import (
    LONG_LEASE,
    SHORT_LEASE,
    attempt,
    claim_one,
    claim_time,
    clock_passes,
    eventually,
    new_task,
    reclaim_after_expiry,
)

HolderCall = Callable[[Storage, Claimed, datetime], Awaitable[Status]]
"""An operation of the holder of a lapsed lease; returns the status it must leave."""


async def _extend(storage: Storage, held: Claimed, now: datetime) -> Status:
    expires = await storage.extend_lease(held.task.id, held.token, LONG_LEASE)
    assert expires >= now + LONG_LEASE, "the new expiry is the store's now + the lease"
    assert await storage.claim_due(held.task.queue, 5, LONG_LEASE) == [], (
        "an extended lease is held again: nothing to reclaim"
    )
    return Status.IN_FLIGHT


async def _complete(storage: Storage, held: Claimed, now: datetime) -> Status:
    await storage.complete(held.task.id, held.token, attempt(1, Outcome.SUCCEEDED))
    return Status.SUCCEEDED


async def _reschedule(storage: Storage, held: Claimed, now: datetime) -> Status:
    await storage.reschedule(held.task.id, held.token, attempt(1), now + timedelta(hours=1))
    return Status.PENDING


async def _dead_letter(storage: Storage, held: Claimed, now: datetime) -> Status:
    await storage.dead_letter(held.task.id, held.token, attempt(1, Outcome.PERMANENT))
    return Status.DEAD


LAPSED_HOLDER_CALLS: dict[str, HolderCall] = {
    "extend_lease": _extend,
    "complete": _complete,
    "reschedule": _reschedule,
    "dead_letter": _dead_letter,
}

__all__ = ["RecoveryClauses"]


class RecoveryClauses:
    """Reclaiming an expired lease appends ``LEASE_EXPIRED`` and increments
    ``attempt_count`` atomically with the reclaim; a lease extended in time is kept; a lease
    that lapsed but was not reclaimed is still held: its holder may extend it or resolve the
    task."""

    @pytest.mark.asyncio
    @pytest.mark.parametrize("operation", list(LAPSED_HOLDER_CALLS))
    async def test_a_lapsed_lease_not_yet_reclaimed_is_still_held_by_its_holder(
        self, storage: Storage, queue: str, operation: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        held = await claim_one(storage, queue, SHORT_LEASE)
        assert held.task.lease_expires_at is not None
        now = await clock_passes(storage, held.task.lease_expires_at)
        # nobody has reclaimed the task, so the holder's token is still the current one
        status = await LAPSED_HOLDER_CALLS[operation](storage, held, now)
        stored = await storage.get(held.task.id)
        assert stored.status == status
        assert [a.outcome for a in stored.attempts if a.outcome == Outcome.LEASE_EXPIRED] == [], (
            "the lease was never reclaimed, so no LEASE_EXPIRED record"
        )

    @pytest.mark.asyncio
    async def test_lease_recovery_appends_lease_expired_atomically_with_the_reclaim(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        first = await claim_one(storage, queue, SHORT_LEASE)
        second = await reclaim_after_expiry(storage, queue)
        assert second.task.id == first.task.id

        # the record is part of the claim's own result, not written in a later step
        handed_out = second.task
        assert handed_out.attempt_count == first.task.attempt_count + 1
        assert len(handed_out.attempts) == len(first.task.attempts) + 1
        record = handed_out.attempts[-1]
        assert record.outcome == Outcome.LEASE_EXPIRED
        assert record.number == first.task.attempt_count + 1
        assert record.error_type == "LeaseExpired"
        assert record.finished_at is not None
        assert first.task.lease_expires_at is not None
        assert record.finished_at >= first.task.lease_expires_at, (
            "the lease expired record is written when the lapsed lease is reclaimed"
        )
        assert record.finished_at <= claim_time(second, LONG_LEASE) + timedelta(seconds=1)

        stored = await storage.get(first.task.id)
        assert stored.status == Status.IN_FLIGHT
        assert stored.attempt_count == handed_out.attempt_count
        assert stored.attempts == handed_out.attempts
        assert stored.lease_expires_at == handed_out.lease_expires_at

    @pytest.mark.asyncio
    async def test_lease_recovery_counts_every_lapse(self, storage: Storage, queue: str) -> None:
        await storage.enqueue(new_task(queue))
        await claim_one(storage, queue, SHORT_LEASE)
        await reclaim_after_expiry(storage, queue, SHORT_LEASE)
        third = await reclaim_after_expiry(storage, queue)
        assert third.task.attempt_count == 2
        assert [(a.number, a.outcome) for a in third.task.attempts] == [
            (1, Outcome.LEASE_EXPIRED),
            (2, Outcome.LEASE_EXPIRED),
        ]

    @pytest.mark.asyncio
    async def test_lease_recovery_keeps_earlier_attempts(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        first = await claim_one(storage, queue)
        failure = attempt(1, error_message="first failure")
        due_again = claim_time(first, LONG_LEASE) - timedelta(seconds=1)
        await storage.reschedule(first.task.id, first.token, failure, due_again)
        await claim_one(storage, queue, SHORT_LEASE)
        third = await reclaim_after_expiry(storage, queue)
        assert third.task.attempts[0] == failure
        assert [(a.number, a.outcome) for a in third.task.attempts] == [
            (1, Outcome.FAILED),
            (2, Outcome.LEASE_EXPIRED),
        ]
        assert third.task.attempt_count == 2

    @pytest.mark.asyncio
    async def test_lease_recovery_lets_the_new_holder_resolve_the_task(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        await claim_one(storage, queue, SHORT_LEASE)
        current = await reclaim_after_expiry(storage, queue)
        done = attempt(current.task.attempt_count + 1, Outcome.SUCCEEDED)
        await storage.complete(current.task.id, current.token, done)
        stored = await storage.get(current.task.id)
        assert stored.status == Status.SUCCEEDED
        assert [a.outcome for a in stored.attempts] == [Outcome.LEASE_EXPIRED, Outcome.SUCCEEDED]

    @pytest.mark.asyncio
    async def test_extended_lease_is_not_reclaimed(self, storage: Storage, queue: str) -> None:
        for _ in range(2):
            await storage.enqueue(new_task(queue))
        kept, witness = await storage.claim_due(queue, 2, SHORT_LEASE)
        new_expiry = await storage.extend_lease(kept.task.id, kept.token, LONG_LEASE)
        assert kept.task.lease_expires_at is not None
        assert new_expiry > kept.task.lease_expires_at
        assert (await storage.get(kept.task.id)).lease_expires_at == new_expiry

        # once the witness (claimed with the same short lease) is reclaimed, the storage
        # clock is past the original lease: the extended task must not come back with it
        async def probe() -> list[str] | None:
            ids = [c.task.id for c in await storage.claim_due(queue, 10, LONG_LEASE)]
            return ids or None

        reclaimed = await eventually(probe, "the witness task's lease to lapse")
        assert reclaimed == [witness.task.id]
        await storage.complete(kept.task.id, kept.token, attempt(1, Outcome.SUCCEEDED))
