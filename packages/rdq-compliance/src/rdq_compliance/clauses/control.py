"""Control records (capability ``control``): compare-and-set on their version, and claims that
honour pauses, gates, concurrency and rate limits in the same atomic step that leases."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from rdq.errors import ControlConflict, ValidationError
from rdq.spi import (
    QUEUE_KEY,
    Control,
    Outcome,
    Status,
    Storage,
    handler_key,
)
from rdq_compliance._support import (
    LONG_LEASE,
    SHORT_LEASE,
    attempt,
    claim_one,
    clock_passes,
    new_id,
    new_task,
    snapshot,
)

__all__ = ["ControlClauses"]

CLAIMANTS = 8
A, B = "kit.handlers:a", "kit.handlers:b"


async def _fill(storage: Storage, queue: str, count: int, **fields: Any) -> list[str]:
    ids = []
    for _ in range(count):
        task = new_task(queue, **fields)
        await storage.enqueue(task)
        ids.append(task.id)
    return ids


async def _put(storage: Storage, control: Control) -> Control:
    found = {c.key: c for c in await storage.list_controls(control.queue)}.get(control.key)
    return await storage.put_control(
        control, expected_version=found.version if found is not None else 0
    )


async def _claim_all(storage: Storage, queue: str, lease: timedelta = LONG_LEASE) -> list[str]:
    return [c.task.id for c in await storage.claim_due(queue, 1000, lease)]


class ControlClauses:
    """``put_control`` writes a control record only over the version the caller read (of
    racing writers exactly one succeeds), and ``claim_due`` honours every control of a task's
    keys (``*``, ``handler:<ref>``, ``task.keys``) in the claim itself: a paused key's tasks
    are not claimed, a gate lets exactly that many claims through, a concurrency limit — of a
    task key, the queue's or a handler's, each of a task's keys at once — is never exceeded
    by concurrent claimants, every resolution and a lapsed lease free its slot, a rate limit
    holds over any window, of one claimant or many; held-back tasks never block the others.
    ``retry_now`` makes waiting tasks due; tasks keep their ``keys``."""

    capability = "control"
    since = 3

    @pytest.mark.asyncio
    async def test_put_control_stores_it_with_version_one_and_the_store_time(
        self, storage: Storage, queue: str
    ) -> None:
        control = Control(
            queue=queue,
            key="dep:psp",
            gate=3,
            concurrency=20,
            rate=50,
            per=1.0,
            burst=5,
            state={"breaker": {"state": "half_open", "since": "2030-01-01T00:00:00Z"}, "n": [1]},
        )
        before = await storage.now()
        stored = await storage.put_control(control, expected_version=0)
        after = await storage.now()
        assert stored.version == 1
        assert stored.updated_at is not None and before <= stored.updated_at <= after
        listed = await storage.list_controls(queue)
        assert len(listed) == 1
        got = listed[0]
        assert (got.key, got.gate, got.concurrency, got.rate, got.per, got.burst) == (
            "dep:psp",
            3,
            20,
            50,
            1.0,
            5,
        )
        assert got.state == control.state and got.version == 1 and got.in_use == 0
        assert queue in {c.queue for c in await storage.list_controls()}

    @pytest.mark.asyncio
    async def test_put_control_over_a_stale_version_raises_control_conflict_and_changes_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        first = await storage.put_control(Control(queue=queue, key="k", gate=1), expected_version=0)
        with pytest.raises(ControlConflict) as caught:
            await storage.put_control(Control(queue=queue, key="k", gate=9), expected_version=0)
        assert caught.value.found is not None and caught.value.found.version == 1
        second = await storage.put_control(
            Control(queue=queue, key="k", paused=True), expected_version=first.version
        )
        assert second.version == 2
        with pytest.raises(ControlConflict):
            await storage.put_control(Control(queue=queue, key="k"), expected_version=1)
        (stored,) = await storage.list_controls(queue)
        assert (stored.paused, stored.gate, stored.version) == (True, None, 2)

    @pytest.mark.asyncio
    async def test_of_racing_writers_of_one_version_exactly_one_succeeds(
        self, storage: Storage, queue: str
    ) -> None:
        base = await storage.put_control(Control(queue=queue, key="k"), expected_version=0)

        async def writer(n: int) -> int | None:
            try:
                await storage.put_control(
                    Control(queue=queue, key="k", state={"writer": n}),
                    expected_version=base.version,
                )
            except ControlConflict:
                return None
            return n

        results = await asyncio.gather(*(writer(n) for n in range(CLAIMANTS)))
        winners = [n for n in results if n is not None]
        assert len(winners) == 1, f"no lost update: exactly one writer wins, not {winners}"
        (stored,) = await storage.list_controls(queue)
        assert stored.version == base.version + 1 and stored.state == {"writer": winners[0]}

    @pytest.mark.asyncio
    async def test_delete_control_is_fenced_on_its_version(
        self, storage: Storage, queue: str
    ) -> None:
        stored = await storage.put_control(Control(queue=queue, key="k"), expected_version=0)
        with pytest.raises(ControlConflict):
            await storage.delete_control(queue, "k", expected_version=stored.version + 1)
        assert await storage.delete_control(queue, "k", expected_version=stored.version)
        assert await storage.list_controls(queue) == []
        assert not await storage.delete_control(queue, "k", expected_version=stored.version)

    @pytest.mark.asyncio
    async def test_a_paused_queue_is_not_claimed_and_resumes_when_the_pause_is_lifted(
        self, storage: Storage, queue: str
    ) -> None:
        ids = await _fill(storage, queue, 3)
        paused = await storage.put_control(
            Control(queue=queue, key=QUEUE_KEY, paused=True, state={"by": "ops"}),
            expected_version=0,
        )
        assert await storage.claim_due(queue, 10, LONG_LEASE) == []
        assert (await storage.stats(queue)).pending == 3, "a pause keeps the tasks, untouched"
        await storage.put_control(
            Control(queue=queue, key=QUEUE_KEY), expected_version=paused.version
        )
        assert sorted(await _claim_all(storage, queue)) == sorted(ids)

    @pytest.mark.asyncio
    async def test_a_paused_handler_or_task_key_holds_back_only_its_tasks(
        self, storage: Storage, queue: str
    ) -> None:
        held = await _fill(storage, queue, 3, handler_ref=A)
        keyed = await _fill(storage, queue, 2, handler_ref=B, keys=["dep:psp"])
        free = await _fill(storage, queue, 2, handler_ref=B)
        await storage.put_control(
            Control(queue=queue, key=handler_key(A), paused=True), expected_version=0
        )
        await storage.put_control(
            Control(queue=queue, key="dep:psp", paused=True), expected_version=0
        )
        claimed = await _claim_all(storage, queue)
        assert sorted(claimed) == sorted(free), "held-back tasks never block the others"
        for task_id in held + keyed:
            assert (await storage.get(task_id)).status == Status.PENDING

    @pytest.mark.asyncio
    async def test_a_gate_lets_exactly_that_many_claims_through_and_keeps_the_version(
        self, storage: Storage, queue: str
    ) -> None:
        await _fill(storage, queue, 10, handler_ref=A)
        gated = await storage.put_control(
            Control(queue=queue, key=handler_key(A), gate=3), expected_version=0
        )
        results = await asyncio.gather(
            *(storage.claim_due(queue, 2, LONG_LEASE) for _ in range(CLAIMANTS))
        )
        taken = sum(len(r) for r in results)
        assert taken == 3, f"a gate of 3 lets 3 claims through, not {taken}"
        (after,) = await storage.list_controls(queue)
        assert after.gate == 0, "each claimed task takes one from the gate"
        assert after.version == gated.version, "taking from a gate is not a change of version"
        assert await storage.claim_due(queue, 10, LONG_LEASE) == [], "a gate of 0 holds back"

    @pytest.mark.asyncio
    async def test_a_concurrency_limit_is_never_exceeded_by_concurrent_claimants(
        self, storage: Storage, queue: str
    ) -> None:
        limited = await _fill(storage, queue, 30, keys=["psp"])
        others = await _fill(storage, queue, 5)
        await storage.put_control(
            Control(queue=queue, key="psp", concurrency=4), expected_version=0
        )

        async def claimant() -> list[str]:
            mine = []
            for _ in range(5):
                mine += [c.task.id for c in await storage.claim_due(queue, 3, LONG_LEASE)]
                await asyncio.sleep(0)
            return mine

        results = await asyncio.gather(*(claimant() for _ in range(CLAIMANTS)))
        claimed = Counter(t for r in results for t in r)
        assert max(claimed.values()) == 1
        assert len(set(claimed) & set(limited)) == 4, "4 slots: exactly 4 tasks with the key"
        assert set(others) <= set(claimed), "tasks without the key are not held back"
        (control,) = await storage.list_controls(queue)
        assert control.in_use == 4

    @pytest.mark.asyncio
    async def test_a_concurrency_slot_comes_back_on_resolution_and_when_a_lease_lapses(
        self, storage: Storage, queue: str
    ) -> None:
        await _fill(storage, queue, 4, keys=["psp"])
        await storage.put_control(
            Control(queue=queue, key="psp", concurrency=2), expected_version=0
        )
        first = await storage.claim_due(queue, 10, LONG_LEASE)
        assert len(first) == 2
        done = first[0]
        await storage.complete(done.task.id, done.token, attempt(1, Outcome.SUCCEEDED))
        (second,) = await storage.claim_due(queue, 10, SHORT_LEASE)  # the freed slot
        assert await storage.claim_due(queue, 10, LONG_LEASE) == []
        expires = second.task.lease_expires_at
        assert expires is not None
        await clock_passes(storage, expires)  # a dead worker's lease: its slot is free again
        again = await storage.claim_due(queue, 10, LONG_LEASE)
        assert len(again) == 1, "a lapsed lease's slot is free again"

    @pytest.mark.asyncio
    async def test_a_concurrency_limit_of_the_queue_or_a_handler_counts_every_task_of_it(
        self, storage: Storage, queue: str
    ) -> None:
        """The queue's key and a handler's are every task's without being in ``keys``."""
        of_a = await _fill(storage, queue, 12, handler_ref=A)
        of_b = await _fill(storage, queue, 12, handler_ref=B)
        await storage.put_control(
            Control(queue=queue, key=handler_key(A), concurrency=2), expected_version=0
        )
        await storage.put_control(
            Control(queue=queue, key=QUEUE_KEY, concurrency=5), expected_version=0
        )
        results = await asyncio.gather(
            *(storage.claim_due(queue, 3, LONG_LEASE) for _ in range(CLAIMANTS))
        )
        claimed = [c.task.id for r in results for c in r]
        assert len(claimed) == len(set(claimed)) == 5, f"the queue's 5 slots, not {len(claimed)}"
        assert len(set(claimed) & set(of_a)) <= 2, "handler a's 2 slots"
        assert len(set(claimed) & set(of_b)) >= 3, "b's tasks are not held back by a's limit"
        in_use = {c.key: c.in_use for c in await storage.list_controls(queue)}
        assert in_use == {QUEUE_KEY: 5, handler_key(A): len(set(claimed) & set(of_a))}

    @pytest.mark.asyncio
    async def test_a_task_with_several_limited_keys_needs_and_takes_a_slot_of_each(
        self, storage: Storage, queue: str
    ) -> None:
        first = await _fill(storage, queue, 6, keys=["psp", "tenant:t1"])
        last = await _fill(storage, queue, 6, keys=["tenant:t2", "psp"])
        psp_only = await _fill(storage, queue, 6, keys=["psp"])
        for key, limit in (("tenant:t1", 1), ("tenant:t2", 1), ("psp", 4)):
            await storage.put_control(
                Control(queue=queue, key=key, concurrency=limit), expected_version=0
            )
        results = await asyncio.gather(
            *(storage.claim_due(queue, 2, LONG_LEASE) for _ in range(CLAIMANTS))
        )
        claimed = {c.task.id for r in results for c in r}
        assert len(claimed & set(first)) == 1, "tenant t1's one slot, whatever the key order"
        assert len(claimed & set(last)) == 1, "tenant t2's one slot"
        assert len(claimed) == 4, "psp's four slots, two of them taken by the tenants' tasks"
        assert len(claimed & set(psp_only)) == 2
        in_use = {c.key: c.in_use for c in await storage.list_controls(queue)}
        assert in_use == {"psp": 4, "tenant:t1": 1, "tenant:t2": 1}

    @pytest.mark.asyncio
    async def test_a_concurrency_slot_comes_back_when_its_task_is_rescheduled_or_dead_lettered(
        self, storage: Storage, queue: str
    ) -> None:
        await _fill(storage, queue, 5, keys=["psp"])
        await storage.put_control(
            Control(queue=queue, key="psp", concurrency=2), expected_version=0
        )
        failed, dead = await storage.claim_due(queue, 10, LONG_LEASE)
        assert await storage.claim_due(queue, 10, LONG_LEASE) == []
        later = await storage.now() + timedelta(hours=1)
        await storage.reschedule(failed.task.id, failed.token, attempt(1), later)
        await storage.dead_letter(dead.task.id, dead.token, attempt(1, Outcome.PERMANENT))
        again = await storage.claim_due(queue, 10, LONG_LEASE)
        assert len(again) == 2, "both slots are free once their tasks were resolved"
        (control,) = await storage.list_controls(queue)
        assert control.in_use == 2

    @pytest.mark.asyncio
    async def test_a_rate_limit_holds_over_any_window_under_concurrent_claimants(
        self, storage: Storage, queue: str
    ) -> None:
        await _fill(storage, queue, 60, keys=["api"])
        await storage.put_control(
            Control(queue=queue, key="api", rate=5, per=1.0, burst=2), expected_version=0
        )
        start = await storage.now()
        stamps: list[datetime] = []

        async def claimant() -> None:
            while (await storage.now() - start).total_seconds() <= 2.2:
                for claimed in await storage.claim_due(queue, 3, LONG_LEASE):
                    expires = claimed.task.lease_expires_at
                    assert expires is not None
                    stamps.append(expires - LONG_LEASE)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(claimant() for _ in range(CLAIMANTS)))
        for t in stamps:
            window = [s for s in stamps if t <= s < t + timedelta(seconds=1.0)]
            assert len(window) <= 5 + 2, f"{len(window)} claims in one second: rate 5, burst 2"
        assert len(stamps) >= 5, f"refilled as the store's clock runs: {len(stamps)} in 2 s"

    @pytest.mark.asyncio
    async def test_a_rate_limit_holds_over_any_window_of_its_period(
        self, storage: Storage, queue: str
    ) -> None:
        await _fill(storage, queue, 40, keys=["api"])
        await storage.put_control(
            Control(queue=queue, key="api", rate=6, per=1.0, burst=2), expected_version=0
        )
        start = await storage.now()
        stamps: list[datetime] = []
        while True:
            now = await storage.now()
            if (now - start).total_seconds() > 2.2:
                break
            for claimed in await storage.claim_due(queue, 5, LONG_LEASE):
                expires = claimed.task.lease_expires_at
                assert expires is not None
                stamps.append(expires - LONG_LEASE)
            await asyncio.sleep(0.02)
        assert stamps, "a rate limit lets claims through"
        for t in stamps:
            window = [s for s in stamps if t <= s < t + timedelta(seconds=1.0)]
            assert len(window) <= 6 + 2, f"{len(window)} claims in one second: rate 6, burst 2"
        assert len(stamps) >= 6, f"refilled as the store's clock runs: {len(stamps)} in 2 s"

    @pytest.mark.asyncio
    async def test_a_change_of_rate_refills_the_bucket(self, storage: Storage, queue: str) -> None:
        await _fill(storage, queue, 10, keys=["api"])
        slow = await storage.put_control(
            Control(queue=queue, key="api", rate=1, per=3600.0, burst=1), expected_version=0
        )
        assert len(await _claim_all(storage, queue)) == 1
        assert await _claim_all(storage, queue) == []
        await storage.put_control(
            Control(queue=queue, key="api", rate=100, per=1.0, burst=4),
            expected_version=slow.version,
        )
        assert len(await _claim_all(storage, queue)) == 4

    @pytest.mark.asyncio
    async def test_retry_now_makes_waiting_tasks_due_and_ignores_the_others(
        self, storage: Storage, queue: str
    ) -> None:
        waiting = new_task(queue)
        await storage.enqueue(waiting, delay=timedelta(hours=1))
        await _fill(storage, queue, 1)
        running = await claim_one(storage, queue)
        assert (
            await storage.retry_now(queue, [waiting.id, waiting.id, running.task.id, "nope"]) == 1
        )
        assert await storage.retry_now("other-" + queue, [waiting.id]) == 0
        (claimed,) = await storage.claim_due(queue, 10, LONG_LEASE)
        assert claimed.task.id == waiting.id, "the waiting task is due now"
        assert claimed.task.attempt_count == 0, "retry now uses no attempt"

    @pytest.mark.asyncio
    async def test_a_task_keeps_its_keys_through_every_change_of_status(
        self, storage: Storage, queue: str
    ) -> None:
        task = new_task(queue, new_id(), keys=["dep:psp", "tenant:ä-1"])
        await storage.enqueue(task)
        assert (await storage.get(task.id)).keys == task.keys
        claimed = await claim_one(storage, queue)
        assert claimed.task.keys == task.keys
        await storage.dead_letter(task.id, claimed.token, attempt(1, Outcome.PERMANENT))
        stored = await storage.get(task.id)
        assert stored.keys == task.keys and snapshot(stored)["keys"] == task.keys

    @pytest.mark.asyncio
    @pytest.mark.parametrize(
        ("keys", "field"),
        [
            (["*"], "keys[0]"),
            (["handler:x"], "keys[0]"),
            (["has space"], "keys[0]"),
            ([f"k{n}" for n in range(9)], "keys"),
            (["x" * 201], "keys[0]"),
        ],
        ids=["star", "handler", "space", "too-many", "too-long"],
    )
    async def test_enqueue_of_a_task_with_bad_keys_raises_validation_error(
        self, storage: Storage, queue: str, keys: list[str], field: str
    ) -> None:
        task = new_task(queue, keys=keys)
        with pytest.raises(ValidationError) as caught:
            await storage.enqueue(task)
        assert caught.value.field == field
        assert (await storage.stats(queue)).pending == 0

    @pytest.mark.asyncio
    async def test_put_control_with_a_bad_control_raises_validation_error_and_stores_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        for bad, field in (
            (Control(queue=queue, key="has space"), "control.key"),
            (Control(queue=queue, key="k", gate=-1), "control.gate"),
            (Control(queue=queue, key="k", rate=0), "control.rate"),
            (Control(queue=queue, key="k", per=0.0), "control.per"),
        ):
            with pytest.raises(ValidationError) as caught:
                await storage.put_control(bad, expected_version=0)
            assert caught.value.field == field
        with pytest.raises(ValidationError):
            await storage.put_control(Control(queue=queue, key="k"), expected_version=-1)
        assert await storage.list_controls(queue) == []
