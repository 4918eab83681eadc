"""Redrive and purge: only DEAD tasks of the queue are touched; redrive resets the count and
keeps the history; a selector is ids *or* a filter."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
import pytest

from rdq.errors import NotFound, StaleClaim, ValidationError
from rdq.spi import Capabilities, DLQFilter, Outcome, Selector, Status, Storage
from rdq_compliance._fixtures import require_capability
from rdq_compliance._support import (
    FAR_FUTURE,
    LONG_LEASE,
    attempt,
    claim_one,
    claim_time,
    dead_tasks,
    list_whole_dlq,
    new_id,
    new_task,
    snapshot,
)

__all__ = ["RedrivePurgeClauses"]


async def _one_of_each_status(storage: Storage, queue: str) -> dict[Status, str]:
    """A PENDING, an IN_FLIGHT, a SUCCEEDED and a DEAD task of ``queue``, by status."""
    for _ in range(3):
        await storage.enqueue(new_task(queue))
    done, dead, leased = await storage.claim_due(queue, 3, LONG_LEASE)
    await storage.complete(done.task.id, done.token, attempt(1, Outcome.SUCCEEDED))
    await storage.dead_letter(dead.task.id, dead.token, attempt(1, Outcome.PERMANENT))
    pending = new_task(queue)
    await storage.enqueue(pending)
    return {
        Status.PENDING: pending.id,
        Status.IN_FLIGHT: leased.task.id,
        Status.SUCCEEDED: done.task.id,
        Status.DEAD: dead.task.id,
    }


def _bad_selectors() -> list[Selector]:
    """Selectors that skip the constructor's check: both ids and filter, and neither."""
    both = Selector.by_ids("some-id")
    msgspec.structs.force_setattr(both, "filter", DLQFilter())
    neither = Selector.by_ids("some-id")
    msgspec.structs.force_setattr(neither, "ids", None)
    return [both, neither]


Operation = Callable[[Storage, str, Selector], Awaitable[int]]


async def _redrive(storage: Storage, queue: str, selector: Selector) -> int:
    return await storage.redrive(queue, selector)


async def _purge(storage: Storage, queue: str, selector: Selector) -> int:
    return await storage.purge(queue, selector)


class RedrivePurgeClauses:
    """``redrive`` returns DEAD tasks to PENDING, due now, with ``attempt_count=0``,
    ``redrive_count+1`` and their history; ``purge`` deletes DEAD tasks; both ignore
    everything that is not DEAD in the queue."""

    @pytest.mark.asyncio
    async def test_redrive_resets_attempt_count_and_keeps_history(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        first = await claim_one(storage, queue)
        due_again = claim_time(first, LONG_LEASE)
        await storage.reschedule(first.task.id, first.token, attempt(1), due_again)
        second = await claim_one(storage, queue)
        await storage.dead_letter(second.task.id, second.token, attempt(2, Outcome.PERMANENT))
        history = (await storage.get(first.task.id)).attempts
        assert len(history) == 2

        assert await storage.redrive(queue, Selector.by_ids(first.task.id)) == 1
        stored = await storage.get(first.task.id)
        assert stored.status == Status.PENDING
        assert stored.attempt_count == 0
        assert stored.redrive_count == 1
        assert stored.attempts == history, "redrive keeps the attempt history"
        assert stored.lease_expires_at is None
        assert await list_whole_dlq(storage, queue) == []
        assert (await storage.stats(queue)).dlq_depth == 0

    @pytest.mark.asyncio
    async def test_redriven_task_is_due_now(self, storage: Storage, queue: str) -> None:
        (task_id,) = await dead_tasks(storage, queue, 1)
        assert await storage.redrive(queue, Selector.by_ids(task_id)) == 1
        claimed = await claim_one(storage, queue)
        assert claimed.task.id == task_id
        assert claimed.task.attempt_count == 0
        assert claimed.task.redrive_count == 1

    @pytest.mark.asyncio
    async def test_a_claim_after_a_redrive_gets_a_token_never_handed_out_before(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        first = await claim_one(storage, queue)
        await storage.dead_letter(first.task.id, first.token, attempt(1, Outcome.PERMANENT))
        assert await storage.redrive(queue, Selector.by_ids(first.task.id)) == 1
        second = await claim_one(storage, queue)
        assert second.task.id == first.task.id
        assert second.token != first.token, "a redriven task's next claim gets a fresh token"
        with pytest.raises(StaleClaim):
            await storage.complete(first.task.id, first.token, attempt(1, Outcome.SUCCEEDED))
        await storage.complete(second.task.id, second.token, attempt(1, Outcome.SUCCEEDED))

    @pytest.mark.asyncio
    async def test_redrive_counts_every_redrive_and_history_accumulates(
        self, storage: Storage, queue: str
    ) -> None:
        (task_id,) = await dead_tasks(storage, queue, 1)
        for round_ in (1, 2, 3):
            assert await storage.redrive(queue, Selector.by_ids(task_id)) == 1
            claimed = await claim_one(storage, queue)
            await storage.dead_letter(task_id, claimed.token, attempt(1, Outcome.PERMANENT))
            stored = await storage.get(task_id)
            assert stored.redrive_count == round_
            assert stored.attempt_count == 1
            assert len(stored.attempts) == round_ + 1

    @pytest.mark.asyncio
    async def test_redrive_ignores_tasks_that_are_not_dead_in_the_queue(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        by_status = await _one_of_each_status(storage, queue)
        (foreign,) = await dead_tasks(storage, other_queue, 1)
        bystanders = [by_status[s] for s in (Status.PENDING, Status.IN_FLIGHT, Status.SUCCEEDED)]
        before = {i: snapshot(await storage.get(i)) for i in [*bystanders, foreign]}
        selector = Selector.by_ids(*bystanders, foreign, new_id("absent"))
        assert await storage.redrive(queue, selector) == 0
        assert {i: snapshot(await storage.get(i)) for i in before} == before
        assert await storage.redrive(queue, Selector.by_ids(by_status[Status.DEAD])) == 1

    @pytest.mark.asyncio
    async def test_redrive_of_the_same_id_twice_in_one_selector_counts_once(
        self, storage: Storage, queue: str
    ) -> None:
        (task_id,) = await dead_tasks(storage, queue, 1)
        assert await storage.redrive(queue, Selector.by_ids(task_id, task_id)) == 1
        assert (await storage.get(task_id)).redrive_count == 1

    @pytest.mark.asyncio
    async def test_purge_deletes_the_selected_dead_tasks(
        self, storage: Storage, queue: str
    ) -> None:
        doomed = (await dead_tasks(storage, queue, 4))[:2]
        kept = [t.id for t in await list_whole_dlq(storage, queue) if t.id not in doomed]
        assert await storage.purge(queue, Selector.by_ids(*doomed)) == 2
        for task_id in doomed:
            with pytest.raises(NotFound):
                await storage.get(task_id)
        assert [t.id for t in await list_whole_dlq(storage, queue)] == kept
        assert (await storage.stats(queue)).dlq_depth == 2

    @pytest.mark.asyncio
    async def test_purge_ignores_tasks_that_are_not_dead_in_the_queue(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        by_status = await _one_of_each_status(storage, queue)
        (foreign,) = await dead_tasks(storage, other_queue, 1)
        bystanders = [by_status[s] for s in (Status.PENDING, Status.IN_FLIGHT, Status.SUCCEEDED)]
        before = {i: snapshot(await storage.get(i)) for i in [*bystanders, foreign]}
        selector = Selector.by_ids(*bystanders, foreign, new_id("absent"))
        assert await storage.purge(queue, selector) == 0
        assert {i: snapshot(await storage.get(i)) for i in before} == before
        assert await storage.purge(queue, Selector.by_ids(by_status[Status.DEAD])) == 1

    @pytest.mark.asyncio
    @pytest.mark.parametrize("operation", [_redrive, _purge], ids=["redrive", "purge"])
    async def test_bad_selector_raises_validation_error_and_changes_nothing(
        self, storage: Storage, queue: str, operation: Operation
    ) -> None:
        (task_id,) = await dead_tasks(storage, queue, 1)
        before = snapshot(await storage.get(task_id))
        for selector in _bad_selectors():
            with pytest.raises(ValidationError) as caught:
                await operation(storage, queue, selector)
            assert caught.value.field is not None and caught.value.field.startswith("selector")
        bad_id = Selector.by_ids(task_id, "")
        with pytest.raises(ValidationError) as caught:
            await operation(storage, queue, bad_id)
        assert caught.value.field is not None and caught.value.field.startswith("selector")
        assert snapshot(await storage.get(task_id)) == before

    @pytest.mark.asyncio
    async def test_redrive_by_filter_selects_only_matching_dead_tasks(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "filter_pushdown")
        boom = await dead_tasks(storage, queue, 3, error_type="BoomError")
        other = await dead_tasks(storage, queue, 2, error_type="OtherError")
        selector = Selector.by_filter(DLQFilter(error_type="BoomError"))
        assert await storage.redrive(queue, selector) == 3
        for task_id in boom:
            assert (await storage.get(task_id)).status == Status.PENDING
        assert sorted(t.id for t in await list_whole_dlq(storage, queue)) == sorted(other)

    @pytest.mark.asyncio
    async def test_purge_by_filter_deletes_only_matching_dead_tasks(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "filter_pushdown")
        await storage.enqueue(new_task(queue, handler_ref="kit.handlers:gone"), delay=FAR_FUTURE)
        gone = await dead_tasks(storage, queue, 3, handler_ref="kit.handlers:gone")
        kept = await dead_tasks(storage, queue, 2, handler_ref="kit.handlers:kept")
        selector = Selector.by_filter(DLQFilter(handler_ref="kit.handlers:gone"))
        assert await storage.purge(queue, selector) == 3
        for task_id in gone:
            with pytest.raises(NotFound):
                await storage.get(task_id)
        assert sorted(t.id for t in await list_whole_dlq(storage, queue)) == sorted(kept)
        assert (await storage.stats(queue)).pending == 1, "a pending task of that handler stays"

    @pytest.mark.asyncio
    async def test_empty_filter_selects_the_whole_dlq_of_the_queue(
        self, storage: Storage, queue: str, other_queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "filter_pushdown")
        await dead_tasks(storage, queue, 3)
        (foreign,) = await dead_tasks(storage, other_queue, 1)
        assert await storage.redrive(queue, Selector.by_filter()) == 3
        assert (await storage.get(foreign)).status == Status.DEAD
