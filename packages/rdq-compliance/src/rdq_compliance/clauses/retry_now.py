"""``retry_now`` (capability ``control``): an operator's "retry now" for tasks waiting out
their backoff, and nothing for any other task."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rdq.spi import Control, Outcome, Storage
from rdq_compliance._flow_support import claim_ids, fill, update
from rdq_compliance._support import (
    FAR_FUTURE,
    LONG_LEASE,
    SHORT_LEASE,
    attempt,
    claim_one,
    clock_passes,
    new_task,
    snapshot,
)

__all__ = ["RetryNowClauses"]


class RetryNowClauses:
    """``retry_now`` makes the listed PENDING tasks that are not yet due due at the store's
    now, and leaves every other task exactly as it was: one already due keeps its due time
    (its place in line), a running one, a lapsed lease, a finished one are not touched. A task
    retried now keeps its attempts, priority and keys: it is claimed in its priority order,
    under the controls of its keys."""

    capability = "control"
    since = 3

    @pytest.mark.asyncio
    async def test_retry_now_leaves_a_task_already_due_where_it_stands_in_line(
        self, storage: Storage, queue: str
    ) -> None:
        now = await storage.now()
        early = new_task(queue, next_attempt_at=now - timedelta(hours=1))
        await storage.enqueue(early)
        later = await fill(storage, queue, 1)
        before = snapshot(await storage.get(early.id))
        assert await storage.retry_now(queue, [early.id]) == 0, "a due task is not moved"
        assert snapshot(await storage.get(early.id)) == before
        assert await claim_ids(storage, queue, limit=1) == [early.id], "still first in line"
        assert await claim_ids(storage, queue) == later

    @pytest.mark.asyncio
    async def test_retry_now_leaves_running_lapsed_and_finished_tasks_alone(
        self, storage: Storage, queue: str
    ) -> None:
        running, lapsing, done, dead = await fill(storage, queue, 4)
        by_id = {c.task.id: c for c in await storage.claim_due(queue, 4, LONG_LEASE)}
        await storage.extend_lease(lapsing, by_id[lapsing].token, SHORT_LEASE)
        await storage.complete(done, by_id[done].token, attempt(1, Outcome.SUCCEEDED))
        await storage.dead_letter(dead, by_id[dead].token, attempt(1, Outcome.PERMANENT))
        lapsed_at = (await storage.get(lapsing)).lease_expires_at
        assert lapsed_at is not None
        await clock_passes(storage, lapsed_at + timedelta(microseconds=1))
        ids = [running, lapsing, done, dead]
        before = {task_id: snapshot(await storage.get(task_id)) for task_id in ids}
        assert await storage.retry_now(queue, ids) == 0
        after = {task_id: snapshot(await storage.get(task_id)) for task_id in ids}
        assert after == before, "retry_now touches no task that is not waiting"
        (reclaimed,) = await storage.claim_due(queue, 10, LONG_LEASE)
        assert reclaimed.task.id == lapsing, "the lapsed lease alone is due"

    @pytest.mark.asyncio
    async def test_a_task_retried_now_is_claimed_in_its_priority_order_under_its_controls(
        self, storage: Storage, queue: str
    ) -> None:
        urgent = new_task(queue, priority=5)
        keyed = new_task(queue, priority=9, keys=["dep:psp"])
        for task in (urgent, keyed):
            await storage.enqueue(task)
        by_id = {c.task.id: c for c in await storage.claim_due(queue, 2, LONG_LEASE)}
        later = await storage.now() + FAR_FUTURE
        for task in (urgent, keyed):
            await storage.reschedule(task.id, by_id[task.id].token, attempt(1), later)
        plain = await fill(storage, queue, 2, priority=1)
        await storage.put_control(
            Control(queue=queue, key="dep:psp", paused=True), expected_version=0
        )
        before = await storage.now()
        assert await storage.retry_now(queue, [keyed.id, urgent.id]) == 2
        retried = await storage.get(urgent.id)
        assert retried.next_attempt_at is not None
        assert before <= retried.next_attempt_at <= await storage.now(), "due at the store's now"
        assert (retried.attempt_count, retried.priority) == (1, 5)
        assert await claim_ids(storage, queue, limit=1) == [urgent.id], "priority 5 before 1"
        assert sorted(await claim_ids(storage, queue)) == sorted(plain), "the paused key waits"
        await update(storage, queue, "dep:psp", paused=False)
        assert (await claim_one(storage, queue)).task.id == keyed.id
