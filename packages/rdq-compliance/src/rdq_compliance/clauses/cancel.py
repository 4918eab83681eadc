"""Cancel: PENDING and IN_FLIGHT tasks become CANCELLED, never run again, and go away with
``purge`` by ids or ``purge_succeeded``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from rdq.errors import NotFound, StaleClaim, ValidationError
from rdq.spi import Capabilities, DLQFilter, Outcome, Selector, Status, Storage, bounds
from rdq_compliance._fixtures import require_capability
from rdq_compliance._support import (
    LONG_LEASE,
    SHORT_LEASE,
    attempt,
    claim_one,
    clock_passes,
    dead_tasks,
    list_whole_dlq,
    new_id,
    new_task,
    snapshot,
)

__all__ = ["CancelClauses"]

HolderCall = Callable[[Storage, str, str], Awaitable[object]]

HOLDER_CALLS: dict[str, HolderCall] = {
    "extend_lease": lambda s, i, t: s.extend_lease(i, t, LONG_LEASE),
    "complete": lambda s, i, t: s.complete(i, t, attempt(1, Outcome.SUCCEEDED)),
    "reschedule": lambda s, i, t: _reschedule(s, i, t),
    "dead_letter": lambda s, i, t: s.dead_letter(i, t, attempt(1, Outcome.PERMANENT)),
}


async def _reschedule(storage: Storage, task_id: str, token: str) -> None:
    await storage.reschedule(task_id, token, attempt(1), await storage.now())


async def _cancelled(storage: Storage, queue: str) -> str:
    """The id of a CANCELLED task of ``queue`` (it was PENDING)."""
    task = new_task(queue)
    await storage.enqueue(task)
    assert await storage.cancel(queue, [task.id]) == 1
    return task.id


class CancelClauses:
    """``cancel`` turns the listed PENDING and IN_FLIGHT tasks of a queue into CANCELLED ones
    (``cancelled_at`` = the store's now, lease and claim cleared, the holder's token stale);
    a cancelled task is never claimed, redriven or listed in the DLQ; ``purge`` by ids and
    ``purge_succeeded`` delete it; ``stats`` counts it as ``cancelled``."""

    capability = "cancel"

    @pytest.mark.asyncio
    async def test_cancel_makes_a_pending_task_cancelled_and_it_is_never_claimed(
        self, storage: Storage, queue: str
    ) -> None:
        doomed, kept = new_task(queue), new_task(queue)
        await storage.enqueue(doomed)
        await storage.enqueue(kept)
        before = await storage.now()
        assert await storage.cancel(queue, [doomed.id]) == 1
        after = await storage.now()
        stored = await storage.get(doomed.id)
        assert stored.status == Status.CANCELLED
        assert stored.cancelled_at is not None
        assert before <= stored.cancelled_at <= after, "cancelled_at is the store's now"
        assert [c.task.id for c in await storage.claim_due(queue, 5, LONG_LEASE)] == [kept.id]
        assert await storage.enqueue(new_task(queue, doomed.id)) is False
        assert (await storage.get(doomed.id)).status == Status.CANCELLED

    @pytest.mark.asyncio
    async def test_cancel_of_an_in_flight_task_makes_its_holders_token_stale(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        held = await claim_one(storage, queue)
        assert await storage.cancel(queue, [held.task.id]) == 1
        stored = await storage.get(held.task.id)
        assert stored.status == Status.CANCELLED
        assert (stored.lease_expires_at, stored.claimed_by, stored.claimed_at) == (None,) * 3
        before = snapshot(stored)
        for name, call in HOLDER_CALLS.items():
            with pytest.raises(StaleClaim):
                await call(storage, held.task.id, held.token)
            assert snapshot(await storage.get(held.task.id)) == before, f"{name} changed it"

    @pytest.mark.asyncio
    async def test_a_cancelled_in_flight_task_is_not_claimed_once_its_old_lease_has_passed(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        held = await claim_one(storage, queue, SHORT_LEASE)
        assert await storage.cancel(queue, [held.task.id]) == 1
        assert held.task.lease_expires_at is not None
        await clock_passes(storage, held.task.lease_expires_at)
        assert await storage.claim_due(queue, 5, LONG_LEASE) == []
        stored = await storage.get(held.task.id)
        assert stored.status == Status.CANCELLED
        assert stored.attempts == [], "no LEASE_EXPIRED record: the task was not reclaimed"

    @pytest.mark.asyncio
    async def test_cancel_ignores_finished_tasks_other_queues_and_unknown_ids(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        for _ in range(2):
            await storage.enqueue(new_task(queue))
        done, dead = await storage.claim_due(queue, 2, LONG_LEASE)
        await storage.complete(done.task.id, done.token, attempt(1, Outcome.SUCCEEDED))
        await storage.dead_letter(dead.task.id, dead.token, attempt(1, Outcome.PERMANENT))
        cancelled = await _cancelled(storage, queue)
        foreign = new_task(other_queue)
        await storage.enqueue(foreign)
        bystanders = [done.task.id, dead.task.id, cancelled, foreign.id]
        before = {i: snapshot(await storage.get(i)) for i in bystanders}
        assert await storage.cancel(queue, [*bystanders, new_id("absent")]) == 0
        assert {i: snapshot(await storage.get(i)) for i in bystanders} == before

    @pytest.mark.asyncio
    async def test_cancel_counts_an_id_given_twice_once(self, storage: Storage, queue: str) -> None:
        task = new_task(queue)
        await storage.enqueue(task)
        assert await storage.cancel(queue, [task.id, task.id]) == 1
        assert await storage.cancel(queue, [task.id]) == 0, "a CANCELLED task stays cancelled"

    @pytest.mark.asyncio
    async def test_purge_by_ids_deletes_cancelled_tasks(self, storage: Storage, queue: str) -> None:
        cancelled = await _cancelled(storage, queue)
        assert await storage.purge(queue, Selector.by_ids(cancelled)) == 1
        with pytest.raises(NotFound):
            await storage.get(cancelled)

    @pytest.mark.asyncio
    async def test_purge_by_filter_leaves_cancelled_tasks_alone(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "filter_pushdown")
        cancelled = await _cancelled(storage, queue)
        await dead_tasks(storage, queue, 1)
        assert await storage.purge(queue, Selector.by_filter(DLQFilter())) == 1
        assert (await storage.get(cancelled)).status == Status.CANCELLED

    @pytest.mark.asyncio
    async def test_purge_succeeded_deletes_tasks_cancelled_before_the_cutoff(
        self, storage: Storage, queue: str
    ) -> None:
        cancelled = await _cancelled(storage, queue)
        at = (await storage.get(cancelled)).cancelled_at
        assert at is not None
        assert await storage.purge_succeeded(queue, at) == 0, "the cutoff is exclusive"
        assert await storage.purge_succeeded(queue, at + timedelta(microseconds=1)) == 1
        with pytest.raises(NotFound):
            await storage.get(cancelled)

    @pytest.mark.asyncio
    async def test_a_purged_id_enqueued_again_elsewhere_is_claimed_only_from_its_new_queue(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        by_ids, by_age = await _cancelled(storage, queue), await _cancelled(storage, queue)
        assert await storage.purge(queue, Selector.by_ids(by_ids)) == 1
        at = (await storage.get(by_age)).cancelled_at
        assert at is not None
        assert await storage.purge_succeeded(queue, at + timedelta(microseconds=1)) == 1
        # a purged id is free: it may come back in any queue, as a new task
        for task_id in (by_ids, by_age):
            assert await storage.enqueue(new_task(other_queue, task_id)) is True
        assert await storage.claim_due(queue, 5, LONG_LEASE) == [], "claimed from its old queue"
        claimed = await storage.claim_due(other_queue, 5, LONG_LEASE)
        assert sorted(c.task.id for c in claimed) == sorted([by_ids, by_age])
        assert all(c.task.attempts == [] and c.task.attempt_count == 0 for c in claimed)

    @pytest.mark.asyncio
    async def test_stats_count_cancelled_tasks_apart_from_every_other_status(
        self, storage: Storage, queue: str
    ) -> None:
        ids = [new_task(queue).id for _ in range(4)]
        for task_id in ids:
            await storage.enqueue(new_task(queue, task_id))
        held = await claim_one(storage, queue)
        waiting = next(task_id for task_id in ids if task_id != held.task.id)
        assert await storage.cancel(queue, [held.task.id, waiting]) == 2
        stats = await storage.stats(queue)
        counts = (stats.pending, stats.in_flight, stats.dlq_depth, stats.succeeded)
        assert (counts, stats.cancelled) == ((2, 0, 0, 0), 2)

    @pytest.mark.asyncio
    async def test_a_cancelled_task_is_not_in_the_dlq_and_is_not_redriven(
        self, storage: Storage, queue: str
    ) -> None:
        cancelled = await _cancelled(storage, queue)
        assert await list_whole_dlq(storage, queue) == []
        assert await storage.redrive(queue, Selector.by_ids(cancelled)) == 0
        assert (await storage.get(cancelled)).status == Status.CANCELLED
        assert (await storage.stats(queue)).dlq_depth == 0

    @pytest.mark.asyncio
    async def test_cancel_with_bad_ids_raises_validation_error_and_changes_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        task = new_task(queue)
        await storage.enqueue(task)
        cases = {
            "ids[1]": [task.id, ""],
            "ids[0]": ["has space"],
            "ids": ["x"] * (bounds.MAX_SELECTOR_IDS + 1),
        }
        for field, ids in cases.items():
            with pytest.raises(ValidationError) as caught:
                await storage.cancel(queue, ids)
            assert caught.value.field == field
        assert (await storage.get(task.id)).status == Status.PENDING
