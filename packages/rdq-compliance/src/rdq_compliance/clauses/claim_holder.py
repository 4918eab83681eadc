"""The claim holder: ``claimed_by`` / ``claimed_at`` while a task is IN_FLIGHT, and the
``LEASE_EXPIRED`` record that names the holder whose lease lapsed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rdq.errors import ValidationError
from rdq.spi import Outcome, Status, Storage, bounds
from rdq_compliance._support import (
    LONG_LEASE,
    SHORT_LEASE,
    attempt,
    claim_one,
    claim_time,
    new_task,
    reclaim_after_expiry,
)

__all__ = ["ClaimHolderClauses"]


class ClaimHolderClauses:
    """``claim_due`` records the claimant's ``worker_id`` as ``claimed_by`` and its own now as
    ``claimed_at``; resolutions clear both; reclaiming a lapsed lease writes a
    ``LEASE_EXPIRED`` record with ``number`` = attempt_count + 1, ``error_type``
    ``"LeaseExpired"``, ``started_at`` = the lapsed claim's ``claimed_at``, ``finished_at`` =
    the reclaim's storage time and ``worker_id`` = the lapsed holder."""

    capability = "claim_holder"

    @pytest.mark.asyncio
    async def test_claim_records_the_claimant_and_the_claim_time_by_the_storage_clock(
        self, storage: Storage, queue: str
    ) -> None:
        for _ in range(2):
            await storage.enqueue(new_task(queue))
        [named] = await storage.claim_due(queue, 1, LONG_LEASE, worker_id="kit-host:42:w1")
        assert named.task.claimed_by == "kit-host:42:w1"
        assert named.task.claimed_at == claim_time(named, LONG_LEASE), (
            "claimed_at is the claim's storage time: lease_expires_at - lease"
        )
        stored = await storage.get(named.task.id)
        assert (stored.claimed_by, stored.claimed_at) == (
            named.task.claimed_by,
            named.task.claimed_at,
        )
        [anonymous] = await storage.claim_due(queue, 1, LONG_LEASE)
        assert anonymous.task.claimed_by is None
        assert anonymous.task.claimed_at == claim_time(anonymous, LONG_LEASE)

    @pytest.mark.asyncio
    async def test_every_resolution_clears_the_claimant_and_the_claim_time(
        self, storage: Storage, queue: str
    ) -> None:
        for _ in range(3):
            await storage.enqueue(new_task(queue))
        done, failed, dead = await storage.claim_due(queue, 3, LONG_LEASE, worker_id="kit-w")
        later = claim_time(done, LONG_LEASE) + timedelta(hours=1)
        await storage.complete(done.task.id, done.token, attempt(1, Outcome.SUCCEEDED))
        await storage.reschedule(failed.task.id, failed.token, attempt(1), later)
        await storage.dead_letter(dead.task.id, dead.token, attempt(1, Outcome.PERMANENT))
        for claimed in (done, failed, dead):
            stored = await storage.get(claimed.task.id)
            assert stored.status != Status.IN_FLIGHT
            assert (stored.claimed_by, stored.claimed_at) == (None, None), (
                f"a {stored.status} task keeps no claim holder"
            )

    @pytest.mark.asyncio
    async def test_a_reclaim_replaces_the_claimant_and_the_claim_time(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        [first] = await storage.claim_due(queue, 1, SHORT_LEASE, worker_id="kit-w1")
        second = await reclaim_after_expiry(storage, queue, worker_id="kit-w2")
        assert second.task.claimed_by == "kit-w2"
        assert second.task.claimed_at == claim_time(second, LONG_LEASE)
        assert first.task.claimed_at is not None
        assert second.task.claimed_at > first.task.claimed_at

    @pytest.mark.asyncio
    async def test_lease_expired_record_names_the_lapsed_holder_its_claim_and_the_reclaim_time(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        earlier = await claim_one(storage, queue)
        due_again = claim_time(earlier, LONG_LEASE) - timedelta(seconds=1)
        await storage.reschedule(earlier.task.id, earlier.token, attempt(1), due_again)
        [lapsed] = await storage.claim_due(queue, 1, SHORT_LEASE, worker_id="kit-w1")
        reclaim = await reclaim_after_expiry(storage, queue, worker_id="kit-w2")
        assert reclaim.task.id == lapsed.task.id
        record = reclaim.task.attempts[-1]
        assert record.outcome == Outcome.LEASE_EXPIRED
        assert record.number == 2, "number = the attempt_count before the reclaim, plus one"
        assert record.error_type == "LeaseExpired"
        assert isinstance(record.error_message, str) and record.error_message
        assert record.started_at == lapsed.task.claimed_at, "started_at = the lapsed claim's time"
        assert record.finished_at == reclaim.task.claimed_at, (
            "finished_at = the reclaim's storage time (the new claim's claimed_at)"
        )
        assert record.worker_id == "kit-w1", "worker_id = the holder whose lease lapsed"
        assert reclaim.task.attempt_count == 2

    @pytest.mark.asyncio
    async def test_lease_expired_record_of_an_anonymous_holder_has_no_worker_id(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        lapsed = await claim_one(storage, queue, SHORT_LEASE)
        reclaim = await reclaim_after_expiry(storage, queue, worker_id="kit-w2")
        record = reclaim.task.attempts[-1]
        assert record.outcome == Outcome.LEASE_EXPIRED
        assert record.worker_id is None
        assert record.started_at == lapsed.task.claimed_at

    @pytest.mark.asyncio
    async def test_claim_due_with_a_bad_worker_id_raises_validation_error(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        for bad in ("", "tab\there", "x" * (bounds.MAX_WORKER_ID_LENGTH + 1), 42):
            with pytest.raises(ValidationError) as caught:
                await storage.claim_due(queue, 1, LONG_LEASE, worker_id=bad)  # type: ignore[arg-type]
            assert caught.value.field == "worker_id", f"worker_id {bad!r}: {caught.value}"
        assert len(await storage.claim_due(queue, 1, LONG_LEASE)) == 1, "the task stays due"
