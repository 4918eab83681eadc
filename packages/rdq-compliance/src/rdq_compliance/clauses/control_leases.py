"""Controls and the life of a lease (capability ``control``): what a lapsed lease, its reclaim,
an extension, a cancel and a batch of completions do to pauses, gates, buckets and slots."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rdq.errors import StaleClaim
from rdq.spi import QUEUE_KEY, Completion, Control, Outcome, Selector, Status, Storage
from rdq_compliance._flow_support import claim_ids, control_of, fill, lapse, put, update
from rdq_compliance._gates import needs
from rdq_compliance._support import (
    FAR_FUTURE,
    LONG_LEASE,
    SHORT_LEASE,
    attempt,
    clock_passes,
    new_task,
    snapshot,
)

__all__ = ["ControlLeaseClauses"]

PER_HOUR = 3600.0
SHORTER_LEASE = timedelta(minutes=5)
"""A lease that ends before a ``LONG_LEASE`` taken a little earlier, and outlives the test."""
REFRESH = timedelta(seconds=1.2)
"""Long enough for a store that keeps a summary of its leases (the earliest end of a live
one, where a count starts) and refreshes it once a second, as PostgreSQL does, to refresh it."""


class ControlLeaseClauses:
    """Controls hold for every claim, the reclaim of a lapsed lease included: a pause holds it
    back, a gate and a bucket give it a token, a concurrency limit a slot. A lease holds its
    slot until it lapses — the extended expiry, not the first —, and a lapsed lease is extended
    only into a free slot (a slot another task took meanwhile makes the extension raise
    ``StaleClaim`` and change nothing; a free one is taken again). Every end of a lease frees
    its slot: a cancel and a batch of completions too. Slots are counted from the leases that
    are live, whenever the limit was set or changed, and whatever order their ends come in (a
    lease claimed or extended to end before leases taken earlier holds its slot too); every
    way a task becomes due keeps it under the controls of its keys."""

    capability = "control"
    since = 3

    @pytest.mark.asyncio
    async def test_a_pause_holds_back_the_reclaim_of_a_lapsed_lease(
        self, storage: Storage, queue: str
    ) -> None:
        keyed = await fill(storage, queue, 1, keys=["dep:psp"])
        plain = await fill(storage, queue, 1)
        claimed = await storage.claim_due(queue, 10, SHORT_LEASE)
        assert len(claimed) == 2
        await storage.put_control(
            Control(queue=queue, key="dep:psp", paused=True), expected_version=0
        )
        queue_paused = await storage.put_control(
            Control(queue=queue, key=QUEUE_KEY, paused=True), expected_version=0
        )
        await lapse(storage, claimed)
        assert await claim_ids(storage, queue) == [], "a paused queue reclaims no lapsed lease"
        assert (await storage.stats(queue)).in_flight == 2
        await storage.put_control(
            Control(queue=queue, key=QUEUE_KEY), expected_version=queue_paused.version
        )
        assert await claim_ids(storage, queue) == plain, "a paused key's lapsed lease stays"
        await update(storage, queue, "dep:psp", paused=False)
        (reclaimed,) = await storage.claim_due(queue, 10, LONG_LEASE)
        assert reclaimed.task.id == keyed[0]
        assert reclaimed.task.attempts[-1].outcome == Outcome.LEASE_EXPIRED

    @pytest.mark.asyncio
    async def test_a_reclaim_takes_from_gates_and_buckets_and_needs_a_slot(
        self, storage: Storage, queue: str
    ) -> None:
        for key in ("gated", "api", "slots"):
            await fill(storage, queue, 2, keys=[key])
        claimed = await storage.claim_due(queue, 10, SHORT_LEASE)
        assert len(claimed) == 6
        for control in (
            Control(queue=queue, key="gated", gate=1),
            Control(queue=queue, key="api", rate=1, per=PER_HOUR, burst=1),
            Control(queue=queue, key="slots", concurrency=1),
        ):
            await storage.put_control(control, expected_version=0)
        await lapse(storage, claimed)
        reclaimed = await storage.claim_due(queue, 10, LONG_LEASE)
        keys = sorted(c.task.keys[0] for c in reclaimed)
        assert keys == ["api", "gated", "slots"], f"one reclaim of each key, not {keys}"
        assert all(c.task.attempts[-1].outcome == Outcome.LEASE_EXPIRED for c in reclaimed)
        assert await claim_ids(storage, queue) == [], "the gate, the bucket and the slot are used"
        gate = await control_of(storage, queue, "gated")
        assert gate is not None and gate.gate == 0, "a reclaim takes one from the gate"

    @pytest.mark.asyncio
    async def test_an_extended_lease_keeps_its_slot_past_its_first_expiry(
        self, storage: Storage, queue: str
    ) -> None:
        await fill(storage, queue, 2, keys=["slots"])
        await storage.put_control(
            Control(queue=queue, key="slots", concurrency=1), expected_version=0
        )
        (held,) = await storage.claim_due(queue, 10, SHORT_LEASE)
        await storage.extend_lease(held.task.id, held.token, LONG_LEASE)
        await lapse(storage, [held])  # the first expiry passes
        assert await claim_ids(storage, queue) == [], "the extended lease holds its slot"
        control = await control_of(storage, queue, "slots")
        assert control is not None and control.in_use == 1

    @pytest.mark.asyncio
    async def test_an_extension_of_a_lapsed_lease_whose_slot_was_taken_raises_stale_claim(
        self, storage: Storage, queue: str
    ) -> None:
        """A lapsed lease's slot is free again; once another task took it, extending the
        lapsed lease would make two hold a slot of one: it raises ``StaleClaim`` and
        changes nothing, and the holder may still resolve the task (that takes no slot)."""
        first, second = await fill(storage, queue, 2, keys=["slots"])
        (lapsing,) = await storage.claim_due(queue, 1, SHORT_LEASE)
        assert lapsing.task.id == first, "the oldest due first"
        await storage.put_control(
            Control(queue=queue, key="slots", concurrency=1), expected_version=0
        )
        await lapse(storage, [lapsing])
        (taken,) = await storage.claim_due(queue, 1, LONG_LEASE)
        assert taken.task.id == second, "the lapsed lease's slot, taken by the task due before it"
        before = snapshot(await storage.get(first))
        with pytest.raises(StaleClaim):
            await storage.extend_lease(first, lapsing.token, LONG_LEASE)
        assert snapshot(await storage.get(first)) == before, "a refused extension changes nothing"
        control = await control_of(storage, queue, "slots")
        assert control is not None and control.in_use == 1, "one slot, one live lease"
        await storage.complete(first, lapsing.token, attempt(1, Outcome.SUCCEEDED))
        assert (await storage.get(first)).status == Status.SUCCEEDED

    @pytest.mark.asyncio
    async def test_an_extension_of_a_lapsed_lease_takes_its_slot_again_when_one_is_free(
        self, storage: Storage, queue: str
    ) -> None:
        waiting = (await fill(storage, queue, 2, keys=["slots"]))[1:]
        (lapsing,) = await storage.claim_due(queue, 1, SHORT_LEASE)
        await storage.put_control(
            Control(queue=queue, key="slots", concurrency=1), expected_version=0
        )
        await lapse(storage, [lapsing])
        control = await control_of(storage, queue, "slots")
        assert control is not None and control.in_use == 0, "a lapsed lease holds no slot"
        expires = await storage.extend_lease(lapsing.task.id, lapsing.token, LONG_LEASE)
        assert expires >= await storage.now() + LONG_LEASE - timedelta(minutes=1)
        control = await control_of(storage, queue, "slots")
        assert control is not None and control.in_use == 1, "the extension took the free slot"
        assert await claim_ids(storage, queue) == [], f"{waiting} waits for the slot"

    @pytest.mark.asyncio
    async def test_a_lease_claimed_to_end_before_leases_taken_earlier_holds_its_slot(
        self, storage: Storage, queue: str
    ) -> None:
        await fill(storage, queue, 3, keys=["slots"])
        await storage.put_control(
            Control(queue=queue, key="slots", concurrency=2), expected_version=0
        )
        (first,) = await storage.claim_due(queue, 1, LONG_LEASE)
        await clock_passes(storage, await storage.now() + REFRESH)
        (second,) = await storage.claim_due(queue, 1, SHORTER_LEASE)
        assert first.task.lease_expires_at is not None
        assert second.task.lease_expires_at is not None
        assert second.task.lease_expires_at < first.task.lease_expires_at
        assert await claim_ids(storage, queue) == [], "two live leases: the limit is used up"
        control = await control_of(storage, queue, "slots")
        assert control is not None and control.in_use == 2

    @pytest.mark.asyncio
    async def test_a_lease_extended_to_end_before_leases_taken_earlier_holds_its_slot(
        self, storage: Storage, queue: str
    ) -> None:
        await fill(storage, queue, 3, keys=["slots"])
        await storage.put_control(
            Control(queue=queue, key="slots", concurrency=2), expected_version=0
        )
        first, second = await storage.claim_due(queue, 2, LONG_LEASE)
        await clock_passes(storage, await storage.now() + REFRESH)
        assert await claim_ids(storage, queue) == [], "two live leases: the limit is used up"
        ends = await storage.extend_lease(first.task.id, first.token, SHORTER_LEASE)
        assert second.task.lease_expires_at is not None
        assert ends < second.task.lease_expires_at
        await clock_passes(storage, await storage.now() + REFRESH)
        assert await claim_ids(storage, queue) == [], "the extended lease still holds its slot"
        control = await control_of(storage, queue, "slots")
        assert control is not None and control.in_use == 2

    @pytest.mark.asyncio
    @needs("cancel")
    async def test_a_cancelled_task_frees_its_slot(self, storage: Storage, queue: str) -> None:
        await fill(storage, queue, 3, keys=["slots"])
        await storage.put_control(
            Control(queue=queue, key="slots", concurrency=1), expected_version=0
        )
        (running,) = await storage.claim_due(queue, 10, LONG_LEASE)
        assert await claim_ids(storage, queue) == []
        assert await storage.cancel(queue, [running.task.id]) == 1
        assert len(await claim_ids(storage, queue)) == 1, "the cancelled task's slot"

    @pytest.mark.asyncio
    async def test_complete_many_frees_the_slot_of_every_task_it_completes(
        self, storage: Storage, queue: str
    ) -> None:
        await fill(storage, queue, 6, keys=["slots"])
        await storage.put_control(
            Control(queue=queue, key="slots", concurrency=3), expected_version=0
        )
        running = await storage.claim_due(queue, 10, LONG_LEASE)
        assert len(running) == 3
        done = [Completion(c.task.id, c.token, attempt(1, Outcome.SUCCEEDED)) for c in running[:2]]
        assert await storage.complete_many(done) == [None, None]
        assert len(await claim_ids(storage, queue)) == 2, "both completed tasks' slots"
        control = await control_of(storage, queue, "slots")
        assert control is not None and control.in_use == 3

    @pytest.mark.asyncio
    async def test_a_limit_set_while_tasks_run_counts_them(
        self, storage: Storage, queue: str
    ) -> None:
        await fill(storage, queue, 5, keys=["slots"])
        running = await storage.claim_due(queue, 3, LONG_LEASE)
        assert len(running) == 3
        await storage.put_control(
            Control(queue=queue, key="slots", concurrency=2), expected_version=0
        )
        control = await control_of(storage, queue, "slots")
        assert control is not None and control.in_use == 3, "leases taken before the limit count"
        assert await claim_ids(storage, queue) == []
        first, second, _ = running
        await storage.complete(first.task.id, first.token, attempt(1, Outcome.SUCCEEDED))
        assert await claim_ids(storage, queue) == [], "two still run: the limit is 2"
        await storage.complete(second.task.id, second.token, attempt(1, Outcome.SUCCEEDED))
        assert len(await claim_ids(storage, queue)) == 1

    @pytest.mark.asyncio
    async def test_a_limit_lowered_below_its_use_holds_back_claims_and_keeps_the_live_leases(
        self, storage: Storage, queue: str
    ) -> None:
        await fill(storage, queue, 6, keys=["slots"])
        await storage.put_control(
            Control(queue=queue, key="slots", concurrency=3), expected_version=0
        )
        running = await storage.claim_due(queue, 10, LONG_LEASE)
        assert len(running) == 3
        await update(storage, queue, "slots", concurrency=1)
        for c in running:  # a live lease keeps its slot, over the limit or not
            await storage.extend_lease(c.task.id, c.token, LONG_LEASE)
        for c in running[:2]:
            assert await claim_ids(storage, queue) == []
            await storage.complete(c.task.id, c.token, attempt(1, Outcome.SUCCEEDED))
        assert await claim_ids(storage, queue) == [], "one still runs: the limit is 1"
        last = running[2]
        await storage.complete(last.task.id, last.token, attempt(1, Outcome.SUCCEEDED))
        assert len(await claim_ids(storage, queue)) == 1
        await update(storage, queue, "slots", concurrency=3)
        assert len(await claim_ids(storage, queue)) == 2, "a limit raised: two more slots"

    @pytest.mark.asyncio
    @needs("batch_enqueue", "import_tasks")
    async def test_every_way_a_task_becomes_due_keeps_it_under_its_keys_controls(
        self, storage: Storage, queue: str
    ) -> None:
        keys = ["dep:psp"]
        now = await storage.now()
        to_reschedule, to_redrive, to_lapse = await fill(storage, queue, 3, keys=keys)
        by_id = {c.task.id: c for c in await storage.claim_due(queue, 10, LONG_LEASE)}
        assert len(by_id) == 3
        lapses_at = await storage.extend_lease(to_lapse, by_id[to_lapse].token, SHORT_LEASE)
        dead = by_id[to_redrive]
        await storage.dead_letter(to_redrive, dead.token, attempt(1, Outcome.PERMANENT))
        waiting = new_task(queue, keys=keys)
        await storage.enqueue(waiting, delay=FAR_FUTURE)
        await storage.put_control(
            Control(queue=queue, key="dep:psp", paused=True), expected_version=0
        )
        enqueued = await fill(storage, queue, 1, keys=keys)
        batch = [new_task(queue, keys=keys) for _ in range(2)]
        assert await storage.enqueue_batch(batch) == [True, True]
        imported = new_task(
            queue, keys=keys, created_at=now, next_attempt_at=now, status=Status.PENDING
        )
        assert await storage.import_tasks([imported]) == [True]
        again = by_id[to_reschedule]
        await storage.reschedule(to_reschedule, again.token, attempt(1), now)
        assert await storage.redrive(queue, Selector.by_ids(to_redrive)) == 1
        assert await storage.retry_now(queue, [waiting.id]) == 1
        free = await fill(storage, queue, 1)
        await clock_passes(storage, lapses_at + timedelta(microseconds=1))
        assert await claim_ids(storage, queue) == free, "every task with the paused key waits"
        await update(storage, queue, "dep:psp", paused=False, concurrency=3)
        due = [*enqueued, *(t.id for t in batch), imported.id, to_reschedule, to_redrive]
        due += [waiting.id, to_lapse]
        taken = await claim_ids(storage, queue)
        assert len(taken) == 3 and set(taken) <= set(due), f"3 slots of the key, not {taken}"
        control = await control_of(storage, queue, "dep:psp")
        assert control is not None and control.in_use == 3
        await put(storage, Control(queue=queue, key="dep:psp"))
        assert sorted(await claim_ids(storage, queue)) == sorted(set(due) - set(taken))
