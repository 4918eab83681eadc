"""Fair shares (capability ``fair_shares``, contract version 4): a queue whose own control
names a ``fair`` key prefix is shared among the groups of its due tasks, round-robin, so a
deep backlog of one group delays a shallow one by at most one task per group."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from rdq.errors import ValidationError
from rdq.spi import QUEUE_KEY, Control, Outcome, Selector, Storage, handler_key
from rdq_compliance._gates import needs
from rdq_compliance._support import (
    LONG_LEASE,
    SHORT_LEASE,
    attempt,
    claim_one,
    clock_passes,
    new_id,
    new_task,
)

__all__ = ["FAMILY", "FairShareClauses", "claim_sets", "put_queue_control", "waiting"]

FAMILY = "tenant:"
CLAIMANTS = 8


async def put_queue_control(storage: Storage, queue: str, **settings: Any) -> Control:
    """Write the queue's own control (``*``) with ``settings``, over whatever version it has."""
    found = {c.key: c for c in await storage.list_controls(queue)}.get(QUEUE_KEY)
    return await storage.put_control(
        Control(queue=queue, key=QUEUE_KEY, **settings),
        expected_version=found.version if found is not None else 0,
    )


async def waiting(
    storage: Storage,
    queue: str,
    count: int,
    *,
    since: float,
    keys: list[str] | None = None,
    priority: int = 0,
    prefix: str = "t",
    now: datetime | None = None,
    **fields: Any,
) -> list[str]:
    """Enqueue ``count`` tasks due ``since`` seconds ago, one more second later each (the
    first is the oldest); return their ids, oldest first."""
    at = now or await storage.now()
    ids = []
    for n in range(count):
        task = new_task(
            queue,
            new_id(f"{prefix}-{n:03d}"),
            keys=list(keys or []),
            priority=priority,
            next_attempt_at=at - timedelta(seconds=since - n),
            **fields,
        )
        await storage.enqueue(task)
        ids.append(task.id)
    return ids


async def claim_sets(storage: Storage, queue: str, limit: int, rounds: int) -> list[set[str]]:
    """What ``rounds`` claims of ``limit`` took, one set per claim."""
    return [
        {c.task.id for c in await storage.claim_due(queue, limit, LONG_LEASE)}
        for _ in range(rounds)
    ]


class FairShareClauses:
    """With ``fair`` set on its ``*`` control, a queue's due tasks are claimed by their rank in
    their group (a task's group: its first key with the ``fair`` prefix, or the group of the
    tasks with none), then in claim order: every group's first task before any group's second,
    however deep the others' backlogs, for tasks that were waiting before the queue was made
    fair and for tasks that become due in any way; priorities order each group; the other
    controls are honoured, and what they hold back from the start has no rank; racing
    claimants never take a task twice."""

    capability = "fair_shares"
    since = 4

    @pytest.mark.asyncio
    async def test_a_shallow_group_is_claimed_within_one_batch_behind_a_deep_one(
        self, storage: Storage, queue: str
    ) -> None:
        await put_queue_control(storage, queue, fair=FAMILY)
        deep = await waiting(storage, queue, 40, since=300, keys=["tenant:deep"])
        shallow = await waiting(storage, queue, 3, since=10, keys=["tenant:shallow"])
        (first,) = await claim_sets(storage, queue, 6, 1)
        assert first == set(deep[:3]) | set(shallow), (
            "one claim of 6 takes the 3 tasks of the shallow group beside the 3 oldest of the "
            f"deep one; it took {len(first & set(shallow))} of the shallow group"
        )
        (second,) = await claim_sets(storage, queue, 6, 1)
        assert second == set(deep[3:9]), "then the deep group alone, oldest first"

    @pytest.mark.asyncio
    async def test_fair_shares_go_round_robin_among_every_group_and_the_tasks_without_one(
        self, storage: Storage, queue: str
    ) -> None:
        await put_queue_control(storage, queue, fair=FAMILY)
        a = await waiting(storage, queue, 4, since=400, keys=["tenant:a"], prefix="a")
        b = await waiting(storage, queue, 4, since=300, keys=["tenant:b"], prefix="b")
        c = await waiting(storage, queue, 4, since=200, keys=["dep:db", "tenant:c"], prefix="c")
        plain = await waiting(storage, queue, 2, since=100, prefix="n")
        other = await waiting(storage, queue, 2, since=98, keys=["dep:db"], prefix="o")
        none = plain + other  # one group, oldest first
        got = await claim_sets(storage, queue, 4, 4)
        wanted = [{a[r], b[r], c[r], none[r]} for r in range(4)]
        assert got == wanted, (
            "each claim of 4 takes the next task of each of the 4 groups (the tasks without a "
            "tenant key are one group)"
        )

    @pytest.mark.asyncio
    async def test_a_tasks_group_is_its_first_key_of_the_family(
        self, storage: Storage, queue: str
    ) -> None:
        await put_queue_control(storage, queue, fair=FAMILY)
        (x1,) = await waiting(storage, queue, 1, since=50, keys=["tenant:x"], prefix="x1")
        (x2,) = await waiting(
            storage, queue, 1, since=40, keys=["dep:psp", "tenant:x", "tenant:y"], prefix="x2"
        )
        (y1,) = await waiting(storage, queue, 1, since=30, keys=["tenant:y"], prefix="y1")
        assert await claim_sets(storage, queue, 2, 2) == [{x1, y1}, {x2}], (
            "a task with keys dep:psp, tenant:x, tenant:y belongs to tenant:x only"
        )

    @pytest.mark.asyncio
    async def test_priorities_and_due_times_order_each_group(
        self, storage: Storage, queue: str
    ) -> None:
        await put_queue_control(storage, queue, fair=FAMILY)
        (old,) = await waiting(storage, queue, 1, since=100, keys=["tenant:a"], prefix="old")
        (urgent,) = await waiting(
            storage, queue, 1, since=10, keys=["tenant:a"], priority=5, prefix="urgent"
        )
        (later,) = await waiting(storage, queue, 1, since=5, keys=["tenant:a"], priority=5)
        (b,) = await waiting(storage, queue, 1, since=50, keys=["tenant:b"], prefix="b")
        got = await claim_sets(storage, queue, 2, 1) + await claim_sets(storage, queue, 1, 2)
        assert got == [{urgent, b}, {later}, {old}], (
            "within a group the highest priority goes first, then the oldest due"
        )

    @pytest.mark.asyncio
    async def test_tasks_waiting_before_the_queue_was_made_fair_are_shared_too(
        self, storage: Storage, queue: str
    ) -> None:
        deep = await waiting(storage, queue, 30, since=300, keys=["tenant:deep"])
        shallow = await waiting(storage, queue, 2, since=10, keys=["tenant:shallow"])
        assert await claim_sets(storage, queue, 1, 1) == [{deep[0]}], "not fair yet"
        await put_queue_control(storage, queue, fair=FAMILY)
        assert await claim_sets(storage, queue, 4, 1) == [{*deep[1:3], *shallow}]

    @pytest.mark.asyncio
    async def test_a_queue_no_longer_fair_is_claimed_in_priority_order_again(
        self, storage: Storage, queue: str
    ) -> None:
        fair = await put_queue_control(storage, queue, fair=FAMILY)
        deep = await waiting(storage, queue, 10, since=300, keys=["tenant:deep"])
        shallow = await waiting(storage, queue, 3, since=10, keys=["tenant:shallow"])
        assert await claim_sets(storage, queue, 2, 1) == [{deep[0], shallow[0]}]
        await storage.put_control(
            Control(queue=queue, key=QUEUE_KEY), expected_version=fair.version
        )
        assert await claim_sets(storage, queue, 3, 1) == [set(deep[1:4])], (
            "without fair shares the oldest due go first again"
        )

    @pytest.mark.asyncio
    async def test_every_way_a_task_becomes_due_keeps_it_in_its_group(
        self, storage: Storage, queue: str
    ) -> None:
        await put_queue_control(storage, queue, fair=FAMILY)
        (failing,) = await waiting(storage, queue, 1, since=80, keys=["tenant:retried"])
        (dying,) = await waiting(storage, queue, 1, since=70, keys=["tenant:redriven"])
        held = {c.task.id: c for c in await storage.claim_due(queue, 10, LONG_LEASE)}
        assert set(held) == {failing, dying}
        (lapsing,) = await waiting(storage, queue, 1, since=90, keys=["tenant:lapsed"])
        lapsed = await claim_one(storage, queue, SHORT_LEASE)
        assert lapsed.task.id == lapsing
        now = await storage.now()
        await storage.reschedule(
            failing, held[failing].token, attempt(1), now - timedelta(seconds=1)
        )
        await storage.dead_letter(dying, held[dying].token, attempt(1, Outcome.PERMANENT))
        assert await storage.redrive(queue, Selector.by_ids(dying)) == 1
        waiter = new_task(queue, keys=["tenant:waited"])
        await storage.enqueue(waiter, delay=timedelta(hours=1))
        assert await storage.retry_now(queue, [waiter.id]) == 1
        fresh = new_task(queue, keys=["tenant:fresh"])
        await storage.enqueue(fresh)
        deep = await waiting(storage, queue, 30, since=600, keys=["tenant:deep"])
        expires = lapsed.task.lease_expires_at
        assert expires is not None
        await clock_passes(storage, expires)
        (got,) = await claim_sets(storage, queue, 6, 1)
        assert got == {deep[0], lapsing, failing, dying, waiter.id, fresh.id}, (
            "a lapsed lease, a rescheduled, a redriven, a retried-now and a new task are each "
            "the first of their group, taken beside the oldest of the deep group"
        )

    @pytest.mark.asyncio
    @needs("batch_enqueue", "import_tasks")
    async def test_tasks_admitted_in_a_batch_or_imported_join_their_group(
        self, storage: Storage, queue: str
    ) -> None:
        await put_queue_control(storage, queue, fair=FAMILY)
        deep = await waiting(storage, queue, 20, since=600, keys=["tenant:deep"])
        batch = [new_task(queue, keys=["tenant:batch"]) for _ in range(2)]
        assert await storage.enqueue_batch(batch) == [True, True]
        now = await storage.now()
        imported = [
            new_task(
                queue,
                keys=["tenant:imported"],
                created_at=now - timedelta(seconds=5),
                next_attempt_at=now - timedelta(seconds=5 - n),
            )
            for n in range(2)
        ]
        assert await storage.import_tasks(imported) == [True, True]
        got = await claim_sets(storage, queue, 6, 1)
        assert got == [{*deep[:2], *(t.id for t in batch), *(t.id for t in imported)}]

    @pytest.mark.asyncio
    async def test_fair_shares_honour_the_other_controls_and_rank_only_what_they_let_through(
        self, storage: Storage, queue: str
    ) -> None:
        await put_queue_control(storage, queue, fair=FAMILY)
        paused = await waiting(
            storage, queue, 3, since=500, keys=["tenant:a"], handler_ref="kit.handlers:p"
        )
        a = await waiting(storage, queue, 2, since=400, keys=["tenant:a"], prefix="a")
        b = await waiting(storage, queue, 3, since=300, keys=["tenant:b", "dep:x"], prefix="b")
        await storage.put_control(
            Control(queue=queue, key=handler_key("kit.handlers:p"), paused=True),
            expected_version=0,
        )
        await storage.put_control(Control(queue=queue, key="dep:x", gate=2), expected_version=0)
        assert await claim_sets(storage, queue, 2, 1) == [{a[0], b[0]}], (
            "the paused tasks have no rank: tenant a's first task it may take goes first"
        )
        assert await claim_sets(storage, queue, 10, 1) == [{a[1], b[1]}], (
            "the gate of dep:x lets one more through; the paused tasks stay"
        )
        for task_id in paused:
            assert (await storage.get(task_id)).attempt_count == 0

    @pytest.mark.asyncio
    async def test_racing_claimants_of_a_fair_queue_never_double_claim_and_reach_every_group(
        self, storage: Storage, queue: str
    ) -> None:
        await put_queue_control(storage, queue, fair=FAMILY)
        deep = await waiting(storage, queue, 60, since=600, keys=["tenant:deep"])
        shallow = await waiting(storage, queue, 4, since=10, keys=["tenant:shallow"])
        rounds = await asyncio.gather(
            *(storage.claim_due(queue, 2, LONG_LEASE) for _ in range(CLAIMANTS))
        )
        first = Counter(c.task.id for r in rounds for c in r)
        assert max(first.values(), default=1) == 1, "a task claimed twice"
        assert set(shallow) <= set(first), (
            f"{CLAIMANTS} racing claims of 2 take every task of the shallow group beside the "
            f"deep one; {len(set(shallow) - set(first))} of its 4 were left"
        )
        rest = [c.task.id for c in await storage.claim_due(queue, 1000, LONG_LEASE)]
        assert sorted([*first, *rest]) == sorted(deep + shallow), "every task once"

    @pytest.mark.asyncio
    async def test_put_control_keeps_fair_and_refuses_it_on_a_key_or_malformed(
        self, storage: Storage, queue: str
    ) -> None:
        stored = await put_queue_control(storage, queue, fair=FAMILY)
        assert stored.fair == FAMILY and stored.version == 1
        (listed,) = await storage.list_controls(queue)
        assert (listed.key, listed.fair, listed.aging) == (QUEUE_KEY, FAMILY, None)
        for bad in (
            Control(queue=queue, key="dep:x", fair=FAMILY),
            Control(queue=queue, key=QUEUE_KEY, fair=""),
            Control(queue=queue, key=QUEUE_KEY, fair="has space"),
            Control(queue=queue, key=QUEUE_KEY, fair="x" * 201),
        ):
            with pytest.raises(ValidationError) as caught:
                await storage.put_control(bad, expected_version=stored.version)
            assert caught.value.field == "control.fair", bad
        assert await storage.list_controls(queue) == [listed], "nothing stored"
