"""Admission: ``enqueue`` is idempotent by id within a queue, conflicts across queues, and
owns the status, timestamps and lease of what it stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rdq.errors import IDConflict
from rdq.spi import Attempt, Outcome, Status, Storage
from rdq_compliance._support import (
    FAR_FUTURE,
    LONG_LEASE,
    attempt,
    claim_one,
    new_task,
    snapshot,
)

__all__ = ["AdmissionClauses"]

_SLACK = timedelta(seconds=2)
"""How far one operation's own "now" readings may differ (two reads of the storage clock)."""


class AdmissionClauses:
    """``enqueue`` stores a PENDING task, is idempotent by id within a queue and raises
    ``IDConflict`` for an id that lives in another queue."""

    @pytest.mark.asyncio
    async def test_enqueue_returns_true_and_stores_a_pending_task(
        self, storage: Storage, queue: str
    ) -> None:
        task = new_task(queue, payload={"hello": "world"})
        assert await storage.enqueue(task) is True
        stored = await storage.get(task.id)
        assert stored.status == Status.PENDING
        assert (stored.id, stored.queue, stored.handler_ref) == (task.id, queue, task.handler_ref)
        assert stored.payload == {"hello": "world"}
        assert stored.attempt_count == 0
        assert stored.attempts == []

    @pytest.mark.asyncio
    async def test_enqueue_is_idempotent_within_a_queue(self, storage: Storage, queue: str) -> None:
        task = new_task(queue, payload={"version": 1})
        assert await storage.enqueue(task) is True
        before = snapshot(await storage.get(task.id))
        again = new_task(queue, task.id, payload={"version": 2}, headers={"x": "y"})
        assert await storage.enqueue(again) is False
        assert await storage.enqueue(again, delay=FAR_FUTURE) is False
        assert snapshot(await storage.get(task.id)) == before, "a repeated enqueue changes nothing"
        assert (await storage.stats(queue)).pending == 1

    @pytest.mark.asyncio
    async def test_enqueue_of_a_claimed_task_leaves_its_claim_alone(
        self, storage: Storage, queue: str
    ) -> None:
        task = new_task(queue)
        await storage.enqueue(task)
        claimed = await claim_one(storage, queue)
        before = snapshot(await storage.get(task.id))
        assert await storage.enqueue(new_task(queue, task.id)) is False
        assert snapshot(await storage.get(task.id)) == before
        assert await storage.claim_due(queue, 5, LONG_LEASE) == []
        await storage.complete(task.id, claimed.token, attempt(1, Outcome.SUCCEEDED))

    @pytest.mark.asyncio
    async def test_enqueue_of_a_finished_task_changes_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        for _ in range(2):
            await storage.enqueue(new_task(queue))
        done, dead = await storage.claim_due(queue, 2, LONG_LEASE)
        await storage.complete(done.task.id, done.token, attempt(1, Outcome.SUCCEEDED))
        await storage.dead_letter(dead.task.id, dead.token, attempt(1, Outcome.PERMANENT))
        for task_id in (done.task.id, dead.task.id):
            before = snapshot(await storage.get(task_id))
            assert await storage.enqueue(new_task(queue, task_id)) is False
            assert snapshot(await storage.get(task_id)) == before
        assert await storage.claim_due(queue, 5, LONG_LEASE) == []

    @pytest.mark.asyncio
    async def test_enqueue_same_id_in_another_queue_raises_id_conflict(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        task = new_task(queue)
        await storage.enqueue(task)
        before = snapshot(await storage.get(task.id))
        with pytest.raises(IDConflict) as caught:
            await storage.enqueue(new_task(other_queue, task.id))
        assert caught.value.task_id == task.id
        assert caught.value.existing_queue == queue
        assert snapshot(await storage.get(task.id)) == before
        assert (await storage.stats(other_queue)).pending == 0
        assert await storage.claim_due(other_queue, 5, LONG_LEASE) == []

    @pytest.mark.asyncio
    async def test_enqueue_sets_the_fields_the_store_owns(
        self, storage: Storage, queue: str
    ) -> None:
        long_ago = datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC)
        task = new_task(
            queue,
            status=Status.DEAD,
            created_at=long_ago,
            lease_expires_at=long_ago,
            completed_at=long_ago,
            dead_lettered_at=long_ago,
            claimed_by="not-a-claimant",
            claimed_at=long_ago,
            cancelled_at=long_ago,
        )
        now = await storage.now()
        await storage.enqueue(task)
        stored = await storage.get(task.id)
        assert stored.status == Status.PENDING
        assert stored.created_at is not None
        assert stored.created_at >= now, "created_at is the storage's now, not the caller's"
        assert stored.lease_expires_at is None
        assert stored.completed_at is None
        assert stored.dead_lettered_at is None
        assert (stored.claimed_by, stored.claimed_at, stored.cancelled_at) == (None, None, None)
        assert len(await storage.claim_due(queue, 5, LONG_LEASE)) == 1

    @pytest.mark.asyncio
    async def test_enqueue_keeps_the_history_it_is_given(
        self, storage: Storage, queue: str
    ) -> None:
        history = [Attempt(number=1, outcome=Outcome.FAILED, error_type="Imported")]
        task = new_task(queue, attempts=history, attempt_count=1, redrive_count=2)
        await storage.enqueue(task)
        stored = await storage.get(task.id)
        assert stored.attempts == history
        assert (stored.attempt_count, stored.redrive_count) == (1, 2)

    @pytest.mark.asyncio
    async def test_enqueue_without_delay_makes_the_task_due_at_created_at(
        self, storage: Storage, queue: str
    ) -> None:
        task = new_task(queue)
        await storage.enqueue(task)
        stored = await storage.get(task.id)
        assert stored.created_at is not None
        assert stored.next_attempt_at is not None
        assert abs(stored.next_attempt_at - stored.created_at) <= _SLACK

    @pytest.mark.asyncio
    async def test_enqueue_with_delay_makes_the_task_due_at_created_at_plus_delay(
        self, storage: Storage, queue: str
    ) -> None:
        task = new_task(queue)
        await storage.enqueue(task, delay=timedelta(hours=2))
        stored = await storage.get(task.id)
        assert stored.created_at is not None
        assert stored.next_attempt_at is not None
        wait = stored.next_attempt_at - stored.created_at
        assert abs(wait - timedelta(hours=2)) <= _SLACK
        assert await storage.claim_due(queue, 5, LONG_LEASE) == []

    @pytest.mark.asyncio
    @pytest.mark.parametrize("hours", [3, -3], ids=["future", "past"])
    async def test_enqueue_keeps_a_given_next_attempt_at(
        self, storage: Storage, queue: str, hours: int
    ) -> None:
        """Kept as given, in the past too (a task due since then: its age in the queue counts
        from that time, and it is claimed before tasks due later)."""
        now = await storage.now()
        due = now + timedelta(hours=hours, microseconds=123)
        task = new_task(queue, next_attempt_at=due)
        await storage.enqueue(task, delay=timedelta(minutes=1))
        assert (await storage.get(task.id)).next_attempt_at == due
