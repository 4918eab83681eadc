"""Operations: ``get``, ``stats`` and ``purge_succeeded``, and unknown ids."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from rdq.errors import NotFound
from rdq.spi import Outcome, Stats, Storage
from rdq_compliance._support import (
    FAR_FUTURE,
    LONG_LEASE,
    SHORT_LEASE,
    attempt,
    claim_one,
    clock_passes,
    new_id,
    new_task,
)

__all__ = ["OperationClauses"]

_SLACK = 2.0
"""Seconds two readings of the storage clock inside one ``stats`` call may differ by."""


class OperationClauses:
    """``get`` raises ``NotFound`` for unknown ids; ``stats`` counts each status by the
    storage clock; ``purge_succeeded`` deletes only SUCCEEDED tasks completed before the cutoff."""

    @pytest.mark.asyncio
    async def test_get_of_an_unknown_id_raises_not_found(self, storage: Storage) -> None:
        missing = new_id("absent")
        with pytest.raises(NotFound) as caught:
            await storage.get(missing)
        assert caught.value.task_id == missing

    @pytest.mark.asyncio
    async def test_mutations_of_an_unknown_id_raise_not_found(
        self, storage: Storage, queue: str
    ) -> None:
        missing = new_id("absent")
        far = (await storage.now()) + FAR_FUTURE
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "extend_lease": lambda: storage.extend_lease(missing, "token", LONG_LEASE),
            "reschedule": lambda: storage.reschedule(missing, "token", attempt(1), far),
            "complete": lambda: storage.complete(missing, "token", attempt(1, Outcome.SUCCEEDED)),
            "dead_letter": lambda: storage.dead_letter(
                missing, "token", attempt(1, Outcome.PERMANENT)
            ),
        }
        for name, call in calls.items():
            with pytest.raises(NotFound) as caught:
                await call()
            assert caught.value.task_id == missing, f"{name} names the missing task"
        with pytest.raises(NotFound):
            await storage.get(missing)

    @pytest.mark.asyncio
    async def test_stats_of_an_unused_queue_counts_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        stats = await storage.stats(queue)
        assert isinstance(stats, Stats)
        assert stats.queue == queue
        assert (stats.pending, stats.in_flight, stats.dlq_depth, stats.succeeded) == (0, 0, 0, 0)
        assert stats.oldest_pending_age is None
        assert stats.as_of.utcoffset() == timedelta(0)

    @pytest.mark.asyncio
    async def test_stats_counts_each_status_of_the_queue(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        for _ in range(6):
            await storage.enqueue(new_task(queue))
        await storage.enqueue(new_task(queue), delay=FAR_FUTURE)
        await storage.enqueue(new_task(other_queue))
        a, b, c, _ = await storage.claim_due(queue, 4, LONG_LEASE)
        await storage.complete(a.task.id, a.token, attempt(1, Outcome.SUCCEEDED))
        await storage.dead_letter(b.task.id, b.token, attempt(1, Outcome.PERMANENT))
        later = (await storage.now()) + FAR_FUTURE
        await storage.reschedule(c.task.id, c.token, attempt(1), later)
        stats = await storage.stats(queue)
        # pending: 2 never claimed + 1 delayed + 1 rescheduled; in flight: the fourth
        assert (stats.pending, stats.in_flight, stats.dlq_depth, stats.succeeded) == (4, 1, 1, 1)

    @pytest.mark.asyncio
    async def test_stats_counts_a_lapsed_lease_not_yet_reclaimed_as_in_flight(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        held = await claim_one(storage, queue, SHORT_LEASE)
        assert held.task.lease_expires_at is not None
        await clock_passes(storage, held.task.lease_expires_at)
        stats = await storage.stats(queue)
        assert (stats.pending, stats.in_flight) == (0, 1), (
            "a lapsed lease nobody reclaimed is still IN_FLIGHT"
        )
        assert stats.oldest_pending_age is None

    @pytest.mark.asyncio
    async def test_stats_oldest_pending_age_is_measured_by_the_storage_clock(
        self, storage: Storage, queue: str
    ) -> None:
        now = await storage.now()
        oldest = now - timedelta(hours=1)
        await storage.enqueue(new_task(queue, next_attempt_at=oldest))
        await storage.enqueue(new_task(queue, next_attempt_at=now - timedelta(minutes=5)))
        stats = await storage.stats(queue)
        assert stats.oldest_pending_age is not None
        expected = (stats.as_of - oldest).total_seconds()
        assert abs(stats.oldest_pending_age - expected) <= _SLACK, (
            f"oldest_pending_age {stats.oldest_pending_age} s, but the oldest due task has "
            f"waited {expected} s by the storage's as_of"
        )
        assert stats.oldest_pending_age >= 3600 - _SLACK

    @pytest.mark.asyncio
    async def test_stats_oldest_pending_age_ignores_tasks_not_yet_due(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue), delay=FAR_FUTURE)
        stats = await storage.stats(queue)
        assert stats.pending == 1
        assert stats.oldest_pending_age is None

    @pytest.mark.asyncio
    async def test_purge_succeeded_deletes_only_tasks_completed_before_older_than(
        self, storage: Storage, queue: str
    ) -> None:
        for _ in range(3):
            await storage.enqueue(new_task(queue))
        done = []
        for _ in range(3):
            claimed = await claim_one(storage, queue)
            await storage.complete(claimed.task.id, claimed.token, attempt(1, Outcome.SUCCEEDED))
            done.append(await storage.get(claimed.task.id))
        finished = sorted(t.completed_at for t in done if t.completed_at is not None)
        assert len(finished) == 3
        assert await storage.purge_succeeded(queue, finished[0]) == 0, "the cutoff is exclusive"
        assert (await storage.stats(queue)).succeeded == 3
        assert await storage.purge_succeeded(queue, finished[-1] + timedelta(seconds=1)) == 3
        for task in done:
            with pytest.raises(NotFound):
                await storage.get(task.id)
        assert (await storage.stats(queue)).succeeded == 0

    @pytest.mark.asyncio
    async def test_purge_succeeded_leaves_other_statuses_and_queues_alone(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        for q in (queue, queue, queue, other_queue):
            await storage.enqueue(new_task(q))
        dead, _ = await storage.claim_due(queue, 2, LONG_LEASE)
        await storage.dead_letter(dead.task.id, dead.token, attempt(1, Outcome.PERMANENT))
        foreign = await claim_one(storage, other_queue)
        await storage.complete(foreign.task.id, foreign.token, attempt(1, Outcome.SUCCEEDED))
        cutoff = (await storage.now()) + FAR_FUTURE
        assert await storage.purge_succeeded(queue, cutoff) == 0
        stats = await storage.stats(queue)
        assert (stats.pending, stats.in_flight, stats.dlq_depth) == (1, 1, 1)
        assert (await storage.get(foreign.task.id)).completed_at is not None
