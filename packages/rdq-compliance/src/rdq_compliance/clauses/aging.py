"""Priority aging (capability ``priority_aging``, contract version 4): a queue whose own control
sets ``aging`` is claimed oldest aged due time first (the due time less priority × aging), so
no priority waits for ever behind a stream of higher ones."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from rdq.errors import ValidationError
from rdq.spi import QUEUE_KEY, Control, Storage, aged_due
from rdq_compliance._gates import needs
from rdq_compliance._support import LONG_LEASE, new_task
from rdq_compliance.clauses.fairness import FAMILY, claim_sets, put_queue_control, waiting

__all__ = ["AgingClauses"]

Key = tuple[datetime, str]
"""Where a task stands in an aged queue: (aged due time, id)."""


@dataclass
class _Batch:
    started: int
    ended: int
    ids: list[str]


async def _aged(
    storage: Storage, queue: str, aging: float, spec: list[tuple[int, float]]
) -> dict[str, Key]:
    """One task per (priority, seconds overdue); each id's place in the aged order."""
    now = await storage.now()
    keys: dict[str, Key] = {}
    for priority, overdue in spec:
        due = now - timedelta(seconds=overdue)
        task = new_task(queue, priority=priority, next_attempt_at=due)
        await storage.enqueue(task)
        keys[task.id] = (aged_due(due, priority, aging), task.id)
    return keys


class AgingClauses:
    """With ``aging`` set on its ``*`` control, a queue's due tasks are claimed oldest aged
    due time first — the due time less ``priority × aging`` seconds —, so a task of priority
    ``p`` due at ``d`` goes before every task of priority ``q`` that became due after
    ``d + (q − p) × aging``; racing claimants keep that order and never take a task twice;
    without ``aging`` priorities are strict again; aging and fair shares combine."""

    capability = "priority_aging"
    since = 4

    @pytest.mark.asyncio
    async def test_with_aging_a_lower_priority_task_that_waited_long_enough_goes_first(
        self, storage: Storage, queue: str
    ) -> None:
        (low_long,) = await waiting(storage, queue, 1, since=1800, priority=-10, prefix="l30")
        (high,) = await waiting(storage, queue, 1, since=0, priority=10, prefix="high")
        (low_short,) = await waiting(storage, queue, 1, since=600, priority=-10, prefix="l10")
        await put_queue_control(storage, queue, aging=60.0)
        got = await claim_sets(storage, queue, 1, 3)
        assert got == [{low_long}, {high}, {low_short}], (
            "with a minute per step, the -10 task due 30 minutes ago is worth more than the "
            "fresh +10 one (20 steps = 20 minutes), the one due 10 minutes ago less"
        )

    @pytest.mark.asyncio
    async def test_aging_orders_by_due_time_less_priority_times_aging(
        self, storage: Storage, queue: str
    ) -> None:
        aging = 7.0
        spec = [(p, float(s)) for p in (-4, 0, 3, 9) for s in (11, 53, 97, 151, 233)]
        keys = await _aged(storage, queue, aging, spec)
        await put_queue_control(storage, queue, aging=aging)
        expected = sorted(keys, key=keys.__getitem__)
        got = await claim_sets(storage, queue, 3, 7)
        wanted = [set(expected[i : i + 3]) for i in range(0, len(expected), 3)]
        assert got == wanted, "claims follow the aged due time, oldest first"

    @pytest.mark.asyncio
    async def test_aging_bounds_the_wait_behind_a_stream_of_higher_priorities(
        self, storage: Storage, queue: str
    ) -> None:
        now = await storage.now()
        (low,) = await waiting(storage, queue, 1, since=100, priority=-10, prefix="low", now=now)
        stream = await waiting(storage, queue, 40, since=99, priority=10, prefix="hi", now=now)
        await put_queue_control(storage, queue, aging=1.57)
        order = [next(iter(ids)) for ids in await claim_sets(storage, queue, 1, 41)]
        assert sorted(order) == sorted([low, *stream])
        assert order.index(low) == 31, (
            "20 steps of 1.57 s are 31.4 s: the -10 task goes after the 31 tasks of +10 that "
            f"became due within 31.4 s after it and before every later one, not at "
            f"{order.index(low)}"
        )

    @pytest.mark.asyncio
    async def test_racing_claimants_of_an_aged_queue_never_double_claim_and_keep_its_order(
        self, storage: Storage, queue: str
    ) -> None:
        keys = await _aged(
            storage, queue, 13.0, [(p, float(s)) for p in (-5, 0, 5) for s in range(10, 300, 23)]
        )
        await put_queue_control(storage, queue, aging=13.0)
        events = itertools.count()
        batches: list[_Batch] = []

        async def claimant() -> None:
            for _ in range(len(keys) + 1):
                started = next(events)
                claimed = await storage.claim_due(queue, 2, LONG_LEASE)
                batches.append(_Batch(started, next(events), [c.task.id for c in claimed]))
                if not claimed:
                    return
                await asyncio.sleep(0)

        await asyncio.gather(*(claimant() for _ in range(6)))
        claims = Counter(task_id for batch in batches for task_id in batch.ids)
        assert not [t for t, n in claims.items() if n > 1], "a task claimed twice"
        assert set(claims) == set(keys), "every due task is claimed"
        batch_of = {task_id: batch for batch in batches for task_id in batch.ids}
        for batch in batches:
            for task_id in batch.ids:
                late = [
                    earlier
                    for earlier in keys
                    if keys[earlier] < keys[task_id] and batch_of[earlier].started > batch.ended
                ]
                assert not late, (
                    f"{task_id} was claimed while {late[0]}, older by aged due time, sat "
                    "unclaimed by anyone"
                )

    @pytest.mark.asyncio
    async def test_a_queue_without_aging_is_claimed_by_strict_priority_again(
        self, storage: Storage, queue: str
    ) -> None:
        aged = await put_queue_control(storage, queue, aging=60.0)
        (low,) = await waiting(storage, queue, 1, since=3600, priority=-10, prefix="low")
        (high,) = await waiting(storage, queue, 1, since=0, priority=10, prefix="high")
        await storage.put_control(
            Control(queue=queue, key=QUEUE_KEY), expected_version=aged.version
        )
        assert await claim_sets(storage, queue, 1, 2) == [{high}, {low}]

    @pytest.mark.asyncio
    @needs("fair_shares")
    async def test_aging_orders_each_group_of_a_fair_queue(
        self, storage: Storage, queue: str
    ) -> None:
        await put_queue_control(storage, queue, fair=FAMILY, aging=60.0)
        (low,) = await waiting(storage, queue, 1, since=1800, keys=["tenant:a"], priority=-10)
        (high,) = await waiting(storage, queue, 1, since=0, keys=["tenant:a"], priority=10)
        (b,) = await waiting(storage, queue, 1, since=5, keys=["tenant:b"], prefix="b")
        assert await claim_sets(storage, queue, 2, 2) == [{low, b}, {high}], (
            "tenant a's first task is the one that waited 30 minutes at -10, not the +10 one"
        )

    @pytest.mark.asyncio
    async def test_put_control_keeps_aging_and_refuses_it_on_a_key_or_out_of_range(
        self, storage: Storage, queue: str
    ) -> None:
        stored = await put_queue_control(storage, queue, aging=2.5)
        (listed,) = await storage.list_controls(queue)
        assert (listed.key, listed.aging, listed.fair) == (QUEUE_KEY, 2.5, None)
        for bad in (
            Control(queue=queue, key="dep:x", aging=2.5),
            Control(queue=queue, key=QUEUE_KEY, aging=0.0),
            Control(queue=queue, key=QUEUE_KEY, aging=-1.0),
            Control(queue=queue, key=QUEUE_KEY, aging=86_401.0),
            Control(queue=queue, key=QUEUE_KEY, aging=True),
        ):
            with pytest.raises(ValidationError) as caught:
                await storage.put_control(bad, expected_version=stored.version)
            assert caught.value.field == "control.aging", bad
        assert await storage.list_controls(queue) == [listed], "nothing stored"
