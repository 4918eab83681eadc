"""Priorities: among due tasks, the highest priority is claimed first, oldest due first
within one priority, also when claimants race."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from rdq.errors import ValidationError
from rdq.spi import MAX_PRIORITY, MIN_PRIORITY, Outcome, Selector, Storage
from rdq_compliance._support import (
    FAR_FUTURE,
    LONG_LEASE,
    SHORT_LEASE,
    attempt,
    claim_one,
    claim_time,
    clock_passes,
    new_task,
)

__all__ = ["PriorityClauses"]

Key = tuple[int, datetime, str]
"""The claim order of a task: (-priority, due at, id)."""


@dataclass
class _Batch:
    """One ``claim_due`` call of a racing claimant: when it started and ended (in the order
    of the test's own events) and what it got."""

    started: int
    ended: int
    ids: list[str]


async def _due_tasks(storage: Storage, queue: str, spec: list[tuple[int, int]]) -> dict[str, Key]:
    """Enqueue one due task per (priority, seconds overdue); return each id's claim order."""
    now = await storage.now()
    keys: dict[str, Key] = {}
    for priority, overdue in spec:
        task = new_task(queue, priority=priority, next_attempt_at=now - timedelta(seconds=overdue))
        await storage.enqueue(task)
        assert task.next_attempt_at is not None
        keys[task.id] = (-priority, task.next_attempt_at, task.id)
    return keys


class PriorityClauses:
    """``claim_due`` takes the highest ``priority`` first and, within one priority, the
    oldest due first (a lapsed lease is due at its ``lease_expires_at``); priorities run from
    ``MIN_PRIORITY`` to ``MAX_PRIORITY`` and stay with the task."""

    capability = "priorities"

    @pytest.mark.asyncio
    async def test_claim_order_is_highest_priority_first_then_oldest_due_within_a_priority(
        self, storage: Storage, queue: str
    ) -> None:
        spec = [(p, s) for p in (0, MAX_PRIORITY, -3, MIN_PRIORITY, 5) for s in (30, 90, 60)]
        keys = await _due_tasks(storage, queue, spec)
        expected = sorted(keys, key=keys.__getitem__)
        got: list[set[str]] = []
        for _ in range(len(expected)):
            claimed = await storage.claim_due(queue, 4, LONG_LEASE)
            if not claimed:
                break
            got.append({c.task.id for c in claimed})
        wanted = [set(expected[i : i + 4]) for i in range(0, len(expected), 4)]
        assert got == wanted, "claims must follow (priority descending, due time ascending)"

    @pytest.mark.asyncio
    async def test_a_lower_priority_task_is_claimed_while_a_higher_one_is_not_yet_due(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue, priority=MAX_PRIORITY), delay=FAR_FUTURE)
        low = new_task(queue, priority=MIN_PRIORITY)
        await storage.enqueue(low)
        assert [c.task.id for c in await storage.claim_due(queue, 5, LONG_LEASE)] == [low.id]

    @pytest.mark.asyncio
    async def test_a_lapsed_lease_is_reclaimed_in_its_priority_order(
        self, storage: Storage, queue: str
    ) -> None:
        high = new_task(queue, priority=7)
        await storage.enqueue(high)
        lapsing = await claim_one(storage, queue, SHORT_LEASE)
        assert lapsing.task.lease_expires_at is not None
        await clock_passes(storage, lapsing.task.lease_expires_at)
        now = await storage.now()
        older = new_task(queue, priority=6, next_attempt_at=now - timedelta(hours=1))
        await storage.enqueue(older)
        first = await claim_one(storage, queue)
        assert first.task.id == high.id, "the lapsed priority-7 task goes before priority 6"
        assert first.task.attempts[-1].outcome == Outcome.LEASE_EXPIRED

    @pytest.mark.asyncio
    async def test_racing_claimants_never_double_claim_and_each_takes_tasks_in_priority_order(
        self, storage: Storage, queue: str
    ) -> None:
        spec = [(p, s) for p in (-2, 0, 3) for s in range(10, 140, 10)]
        keys = await _due_tasks(storage, queue, spec)
        events = itertools.count()
        batches: list[_Batch] = []

        async def claimant() -> None:
            for _ in range(len(keys) + 1):  # a sound store runs dry long before that
                started = next(events)
                claimed = await storage.claim_due(queue, 2, LONG_LEASE)
                batches.append(_Batch(started, next(events), [c.task.id for c in claimed]))
                if not claimed:
                    return
                await asyncio.sleep(0)

        await asyncio.gather(*(claimant() for _ in range(6)))
        claims = Counter(task_id for batch in batches for task_id in batch.ids)
        doubles = sorted(task_id for task_id, n in claims.items() if n > 1)
        assert not doubles, f"tasks claimed twice while leased: {doubles}"
        assert set(claims) == set(keys), "every due task is claimed"
        batch_of = {task_id: batch for batch in batches for task_id in batch.ids}
        for batch in batches:
            for task_id in batch.ids:
                # every task that goes first must have been taken by a claim that had
                # started before this one returned (a racing claim may hold it)
                late = [
                    earlier
                    for earlier in keys
                    if keys[earlier] < keys[task_id] and batch_of[earlier].started > batch.ended
                ]
                assert not late, (
                    f"{task_id} (priority {-keys[task_id][0]}) was claimed while "
                    f"{late[0]} (priority {-keys[late[0]][0]}), due earlier or more urgent, "
                    "sat unclaimed by anyone"
                )

    @pytest.mark.asyncio
    async def test_priority_stays_with_the_task_through_claim_reschedule_and_redrive(
        self, storage: Storage, queue: str
    ) -> None:
        task = new_task(queue, priority=-4)
        await storage.enqueue(task)
        first = await claim_one(storage, queue)
        assert first.task.priority == -4
        await storage.reschedule(
            task.id, first.token, attempt(1), claim_time(first, LONG_LEASE) - timedelta(1)
        )
        second = await claim_one(storage, queue)
        await storage.dead_letter(task.id, second.token, attempt(2, Outcome.PERMANENT))
        assert (await storage.get(task.id)).priority == -4
        assert await storage.redrive(queue, Selector.by_ids(task.id)) == 1
        assert (await claim_one(storage, queue)).task.priority == -4

    @pytest.mark.asyncio
    async def test_enqueue_with_a_priority_out_of_range_raises_validation_error(
        self, storage: Storage, queue: str
    ) -> None:
        for bad in (MAX_PRIORITY + 1, MIN_PRIORITY - 1, True, "high", 1.5):
            task = new_task(queue)
            task.priority = bad  # type: ignore[assignment]
            with pytest.raises(ValidationError) as caught:
                await storage.enqueue(task)
            assert caught.value.field == "priority", f"priority {bad!r}: {caught.value}"
        assert (await storage.stats(queue)).pending == 0
