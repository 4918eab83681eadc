"""Retention: ``expire_tasks`` deletes exactly the listed finished tasks whose status time is
before the cut-off, so that the engine can archive what it read and then delete only that."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from rdq.errors import NotFound, ValidationError
from rdq.spi import DLQFilter, Outcome, Selector, Status, Storage, TaskFilter, status_time
from rdq_compliance._gates import needs
from rdq_compliance._support import (
    attempt,
    claim_one,
    dead_tasks,
    list_all_tasks,
    list_whole_dlq,
    new_id,
    new_task,
    snapshot,
)

__all__ = ["RetentionClauses"]


async def _finished(storage: Storage, queue: str) -> dict[Status, str]:
    """A DEAD, a SUCCEEDED and a CANCELLED task of ``queue``, by status."""
    (dead,) = await dead_tasks(storage, queue, 1)
    await storage.enqueue(new_task(queue))
    done = await claim_one(storage, queue)
    await storage.complete(done.task.id, done.token, attempt(1, Outcome.SUCCEEDED))
    cancelled = new_task(queue)
    await storage.enqueue(cancelled)
    assert await storage.cancel(queue, [cancelled.id]) == 1
    return {Status.DEAD: dead, Status.SUCCEEDED: done.task.id, Status.CANCELLED: cancelled.id}


async def _after(storage: Storage) -> datetime:
    """A cut-off just after everything the store did so far, by its clock."""
    return await storage.now() + timedelta(microseconds=1)


async def _gone(storage: Storage, task_id: str) -> bool:
    try:
        await storage.get(task_id)
    except NotFound:
        return True
    return False


class RetentionClauses:
    """``expire_tasks`` deletes the listed tasks of a queue that are finished (DEAD,
    SUCCEEDED, CANCELLED) with their status time before the cut-off, and returns how many; it
    leaves every other id alone — live, of another queue, unknown, finished at or after the
    cut-off (a task redriven and dead-lettered again since it was read), and finished tasks
    it was not given; an expired task is gone from every listing and count, and its id is free
    to be admitted again."""

    capability = "retention"

    @pytest.mark.asyncio
    async def test_expire_tasks_deletes_the_listed_finished_tasks_before_the_cutoff(
        self, storage: Storage, queue: str
    ) -> None:
        finished = await _finished(storage, queue)
        cutoff = await _after(storage)
        assert await storage.expire_tasks(queue, list(finished.values()), cutoff) == 3
        for status, task_id in finished.items():
            assert await _gone(storage, task_id), f"the {status} task was not expired"

    @pytest.mark.asyncio
    async def test_expire_tasks_leaves_tasks_finished_at_or_after_the_cutoff(
        self, storage: Storage, queue: str
    ) -> None:
        finished = await _finished(storage, queue)
        before = {i: snapshot(await storage.get(i)) for i in finished.values()}
        times = [status_time(await storage.get(i)) for i in finished.values()]
        earliest = min(t for t in times if t is not None)
        assert await storage.expire_tasks(queue, list(finished.values()), earliest) == 0
        assert {i: snapshot(await storage.get(i)) for i in before} == before

    @pytest.mark.asyncio
    async def test_expire_tasks_leaves_live_tasks_other_queues_and_unknown_ids_alone(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        pending = new_task(queue)
        await storage.enqueue(new_task(queue))
        leased = await claim_one(storage, queue)
        await storage.enqueue(pending)
        (foreign,) = await dead_tasks(storage, other_queue, 1)
        bystanders = [pending.id, leased.task.id, foreign]
        before = {i: snapshot(await storage.get(i)) for i in bystanders}
        cutoff = await _after(storage)
        ids = [*bystanders, new_id("absent")]
        assert await storage.expire_tasks(queue, ids, cutoff) == 0
        assert {i: snapshot(await storage.get(i)) for i in before} == before

    @pytest.mark.asyncio
    async def test_expire_tasks_deletes_only_the_ids_it_is_given(
        self, storage: Storage, queue: str
    ) -> None:
        older_dead, newer_dead = await dead_tasks(storage, queue, 2)
        succeeded = []
        for _ in range(2):
            await storage.enqueue(new_task(queue))
            done = await claim_one(storage, queue)
            await storage.complete(done.task.id, done.token, attempt(1, Outcome.SUCCEEDED))
            succeeded.append(done.task.id)
        cutoff = await _after(storage)
        assert await storage.expire_tasks(queue, [newer_dead, succeeded[1]], cutoff) == 2
        for kept in (older_dead, succeeded[0]):
            assert not await _gone(storage, kept), (
                f"{kept} finished before the listed tasks but was not listed: it must stay"
            )

    @pytest.mark.asyncio
    async def test_a_task_redriven_and_dead_lettered_again_since_it_was_read_is_not_expired(
        self, storage: Storage, queue: str
    ) -> None:
        (task_id,) = await dead_tasks(storage, queue, 1)
        cutoff = await _after(storage)  # what the engine read and archived was dead before it
        assert await storage.redrive(queue, Selector.by_ids(task_id)) == 1
        again = await claim_one(storage, queue)
        await storage.dead_letter(task_id, again.token, attempt(1, Outcome.PERMANENT))
        assert await storage.expire_tasks(queue, [task_id], cutoff) == 0
        stored = await storage.get(task_id)
        assert stored.status == Status.DEAD and stored.redrive_count == 1

    @pytest.mark.asyncio
    async def test_an_expired_task_leaves_every_listing_and_count(
        self, storage: Storage, queue: str
    ) -> None:
        kept, expired = await dead_tasks(storage, queue, 2)
        cutoff = await _after(storage)
        assert await storage.expire_tasks(queue, [expired], cutoff) == 1
        assert [t.id for t in await list_whole_dlq(storage, queue)] == [kept]
        assert [t.id for t in await list_whole_dlq(storage, queue, DLQFilter())] == [kept]
        assert (await storage.stats(queue)).dlq_depth == 1
        groups = await storage.dlq_groups(queue)
        assert sum(g.count for g in groups) == 1
        if storage.capabilities().task_listing:
            listed = await list_all_tasks(storage, queue, TaskFilter(status=Status.DEAD))
            assert [t.id for t in listed] == [kept]

    @pytest.mark.asyncio
    async def test_an_expired_id_can_be_admitted_again(self, storage: Storage, queue: str) -> None:
        (task_id,) = await dead_tasks(storage, queue, 1)
        assert await storage.expire_tasks(queue, [task_id], await _after(storage)) == 1
        assert await storage.enqueue(new_task(queue, task_id)) is True
        assert (await storage.get(task_id)).status == Status.PENDING

    @needs("import_tasks")
    @pytest.mark.asyncio
    async def test_an_expired_task_imported_again_is_back_in_the_dlq_as_it_was(
        self, storage: Storage, queue: str
    ) -> None:
        (task_id,) = await dead_tasks(storage, queue, 1)
        archived = await storage.get(task_id)
        assert await storage.expire_tasks(queue, [task_id], await _after(storage)) == 1
        assert await storage.import_tasks([archived]) == [True]
        assert snapshot(await storage.get(task_id)) == snapshot(archived)
        assert [t.id for t in await list_whole_dlq(storage, queue)] == [task_id]

    @pytest.mark.asyncio
    async def test_expire_tasks_with_bad_input_raises_validation_error_and_deletes_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        (task_id,) = await dead_tasks(storage, queue, 1)
        with pytest.raises(ValidationError) as naive:
            await storage.expire_tasks(queue, [task_id], datetime(2999, 1, 1))
        assert naive.value.field == "before"
        with pytest.raises(ValidationError) as bad_id:
            await storage.expire_tasks(queue, [task_id, "not an id"], await _after(storage))
        assert bad_id.value.field == "ids[1]"
        with pytest.raises(ValidationError):
            await storage.expire_tasks("-bad", [task_id], await _after(storage))
        assert not await _gone(storage, task_id)
