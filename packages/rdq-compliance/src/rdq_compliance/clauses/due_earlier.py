"""A task made due before the tasks claims have already taken: the next claim takes it first.

A store may start its claims past what it knows no due task lies before (PostgreSQL's claim
floor); every write that makes a task due earlier than that must move the start back. These
clauses claim the oldest tasks of a queue first, so that such a start has moved past them,
then make a task due before all of them, by each write that can.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from rdq.spi import AdmitOutcome, Dedup, Outcome, Status, Storage
from rdq_compliance._gates import needs
from rdq_compliance._support import LONG_LEASE, attempt, claim_one, new_id, new_task

__all__ = ["DueEarlierClauses"]


async def _claimed_past(storage: Storage, queue: str) -> datetime:
    """Six due tasks (60 to 10 seconds overdue), the three oldest claimed and completed: a
    claim that starts past what it already took starts after them. Returns the store's now."""
    now = await storage.now()
    for seconds in (60, 50, 40, 30, 20, 10):
        await storage.enqueue(new_task(queue, next_attempt_at=now - timedelta(seconds=seconds)))
    for claimed in await storage.claim_due(queue, 3, LONG_LEASE):
        await storage.complete(claimed.task.id, claimed.token, attempt(1, Outcome.SUCCEEDED))
    # and a claim that found the next one: a start raised by the claims is where it stands
    first = await claim_one(storage, queue)
    await storage.complete(first.task.id, first.token, attempt(1, Outcome.SUCCEEDED))
    return now


@dataclass
class _Batch:
    started: int
    ended: int
    ids: list[str]


class DueEarlierClauses:
    """After claims have taken a queue's oldest due tasks, a task made due before all that is
    left — enqueued, admitted under a dedup key, imported or rescheduled with a due time in
    the past — is the next one claimed (claims come oldest due first), also while other
    claimants race. (A debounce never moves its holder before the store's now, so it cannot
    put a task before the ones claimed.)"""

    @pytest.mark.asyncio
    async def test_a_task_enqueued_due_in_the_past_is_claimed_before_younger_due_tasks(
        self, storage: Storage, queue: str
    ) -> None:
        now = await _claimed_past(storage, queue)
        late = new_task(queue, next_attempt_at=now - timedelta(hours=1))
        assert await storage.enqueue(late)
        assert (await claim_one(storage, queue)).task.id == late.id, (
            "a task enqueued due an hour ago goes before tasks due seconds ago"
        )

    @pytest.mark.asyncio
    @needs("batch_enqueue")
    async def test_a_batch_enqueued_due_in_the_past_is_claimed_before_younger_due_tasks(
        self, storage: Storage, queue: str
    ) -> None:
        now = await _claimed_past(storage, queue)
        late = [
            new_task(queue, next_attempt_at=now - timedelta(hours=1, seconds=s)) for s in (1, 2)
        ]
        assert await storage.enqueue_batch(late) == [True, True]
        claimed = await storage.claim_due(queue, 2, LONG_LEASE)
        assert {c.task.id for c in claimed} == {t.id for t in late}

    @pytest.mark.asyncio
    @needs("import_tasks", since=2)
    async def test_a_task_imported_due_in_the_past_is_claimed_before_younger_due_tasks(
        self, storage: Storage, queue: str
    ) -> None:
        now = await _claimed_past(storage, queue)
        moved = new_task(
            queue,
            status=Status.PENDING,
            created_at=now - timedelta(days=1),
            next_attempt_at=now - timedelta(hours=1),
        )
        assert await storage.import_tasks([moved]) == [True]
        assert (await claim_one(storage, queue)).task.id == moved.id

    @pytest.mark.asyncio
    @needs("dedup", since=5)
    async def test_a_task_admitted_under_a_key_due_in_the_past_is_claimed_before_younger_due_tasks(
        self, storage: Storage, queue: str
    ) -> None:
        now = await _claimed_past(storage, queue)
        late = new_task(queue, next_attempt_at=now - timedelta(hours=1))
        added = await storage.admit(late, Dedup(key=new_id("key")))
        assert added.outcome == AdmitOutcome.ADDED
        assert (await claim_one(storage, queue)).task.id == late.id, (
            "a task admitted under a key due an hour ago goes before tasks due seconds ago"
        )

    @pytest.mark.asyncio
    async def test_a_task_rescheduled_into_the_past_is_claimed_before_younger_due_tasks(
        self, storage: Storage, queue: str
    ) -> None:
        now = await _claimed_past(storage, queue)
        retried = await claim_one(storage, queue)  # the task due 20 s ago
        await storage.reschedule(
            retried.task.id, retried.token, attempt(1), now - timedelta(hours=1)
        )
        assert (await claim_one(storage, queue)).task.id == retried.task.id

    @pytest.mark.asyncio
    async def test_racing_claimants_take_tasks_enqueued_due_in_the_past_before_younger_ones(
        self, storage: Storage, queue: str
    ) -> None:
        now = await storage.now()
        due: dict[str, datetime] = {}  # every task's due time
        for n in range(200):
            task = new_task(queue, next_attempt_at=now - timedelta(seconds=200 - n))
            await storage.enqueue(task)
            due[task.id] = now - timedelta(seconds=200 - n)
        events = itertools.count()
        batches: list[_Batch] = []
        enqueued_at: dict[str, int] = {}  # each late task: the event its enqueue returned at
        running = True

        async def claimant() -> None:
            while running:
                started = next(events)
                claimed = await storage.claim_due(queue, 2, LONG_LEASE)
                batches.append(_Batch(started, next(events), [c.task.id for c in claimed]))
                await asyncio.sleep(0)

        async def producer() -> None:
            # every few claims, a task due before every task still waiting
            for n in range(12):
                await asyncio.sleep(0.005)
                late = new_task(queue, next_attempt_at=now - timedelta(hours=1, seconds=n))
                await storage.enqueue(late)
                assert late.next_attempt_at is not None
                due[late.id] = late.next_attempt_at
                enqueued_at[late.id] = next(events)

        claimants = [asyncio.create_task(claimant()) for _ in range(4)]
        try:
            await producer()
            # until every task is claimed (checked below), or no claim took one for 15 s: a
            # slow store is given the time it needs, a task it strands is not waited for
            loop = asyncio.get_running_loop()
            claimed, progress_at = 0, loop.time()
            while loop.time() < progress_at + 15:
                taken = {i for b in batches for i in b.ids}
                if taken >= set(due):
                    break
                if len(taken) > claimed:
                    claimed, progress_at = len(taken), loop.time()
                await asyncio.sleep(0.02)
        finally:
            running = False
            await asyncio.gather(*claimants)
        batch_of = {task_id: batch for batch in batches for task_id in batch.ids}
        assert set(batch_of) == set(due), "every due task is claimed"
        for late, returned in enqueued_at.items():
            for batch in batches:
                if batch.started <= returned:
                    continue  # began before the late task was stored
                for task_id in batch.ids:
                    taken_late = batch_of[late].started > batch.ended
                    assert not (due[task_id] > due[late] and taken_late), (
                        f"{task_id} was claimed while {late}, enqueued due earlier before that "
                        "claim began, sat unclaimed by anyone"
                    )
