"""Capabilities: what the store advertises is pinned by the backend, and each one works:
``wait_due`` (notify), ``enqueue_batch`` (batch_enqueue) and ``complete_many``
(batch_complete).

Each capability's test skips, naming it, when the store does not advertise it."""

from __future__ import annotations

import asyncio

import pytest

from rdq.errors import IDConflict, NotFound, StaleClaim, ValidationError
from rdq.spi import Capabilities, Completion, Outcome, RetryOverride, Status, Storage
from rdq_compliance._fixtures import require_capability
from rdq_compliance._support import (
    FAR_FUTURE,
    LONG_LEASE,
    PATIENCE,
    SHORT_LEASE,
    attempt,
    claim_one,
    nested,
    new_task,
    reclaim_after_expiry,
    snapshot,
)

__all__ = ["CapabilityClauses"]


class CapabilityClauses:
    """``capabilities()`` is exactly what the backend's test module declares
    (``expected_capabilities``), on every call; what it advertises works as documented."""

    def test_capabilities_are_exactly_the_ones_the_backend_declares(
        self, storage: Storage, expected_capabilities: Capabilities
    ) -> None:
        advertised = storage.capabilities()
        assert isinstance(advertised, Capabilities)
        assert advertised == expected_capabilities, (
            f"the store advertises {advertised!r}, its test module declares "
            f"{expected_capabilities!r}"
        )
        assert storage.capabilities() == advertised, "capabilities() does not change"

    @pytest.mark.asyncio
    async def test_wait_due_wakes_when_a_task_is_enqueued(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "notify")
        waiter = asyncio.create_task(storage.wait_due(queue, PATIENCE))
        # keep offering due tasks until the waiter notices one (it may start listening late)
        for _ in range(int(PATIENCE / 0.25)):
            if waiter.done():
                break
            await storage.enqueue(new_task(queue))
            await asyncio.wait({waiter}, timeout=0.25)
        assert waiter.done(), "wait_due never returned although due tasks kept arriving"
        assert waiter.result() is True
        assert await storage.claim_due(queue, 1, LONG_LEASE)

    @pytest.mark.asyncio
    async def test_wait_due_on_a_queue_with_nothing_due_returns_false_once_its_timeout_passed(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        """Spurious wake-ups are allowed, but not on every call: of three waits on a queue
        with nothing due, one must time out, and only once its timeout has passed."""
        require_capability(capabilities, "notify")
        await storage.enqueue(new_task(queue), delay=FAR_FUTURE)
        loop = asyncio.get_running_loop()
        timeout = 0.2
        outcomes = []
        for _ in range(3):
            started = loop.time()
            woke = await asyncio.wait_for(storage.wait_due(queue, timeout), PATIENCE)
            waited = loop.time() - started
            assert isinstance(woke, bool)
            if not woke:
                assert waited >= timeout * 0.99, (
                    f"wait_due returned False after {waited:.3f}s, before its {timeout}s timeout"
                )
                break
            outcomes.append(f"True after {waited:.3f}s")
        else:
            raise AssertionError(f"wait_due never timed out with nothing due: {outcomes}")
        assert await storage.claim_due(queue, 1, LONG_LEASE) == []

    @pytest.mark.asyncio
    async def test_enqueue_batch_stores_every_task_and_reports_each_flag(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "batch_enqueue")
        tasks = [new_task(queue, payload={"n": n}) for n in range(5)]
        assert await storage.enqueue_batch(tasks) == [True] * 5
        for task in tasks:
            stored = await storage.get(task.id)
            assert stored.payload == task.payload
        assert len(await storage.claim_due(queue, 10, LONG_LEASE)) == 5

    @pytest.mark.asyncio
    async def test_enqueue_batch_is_idempotent_per_task(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "batch_enqueue")
        old = new_task(queue, payload="old")
        await storage.enqueue(old)
        before = snapshot(await storage.get(old.id))
        fresh = new_task(queue)
        again = new_task(queue, old.id, payload="new")
        assert await storage.enqueue_batch([fresh, again]) == [True, False]
        assert snapshot(await storage.get(old.id)) == before
        assert (await storage.stats(queue)).pending == 2

    @pytest.mark.asyncio
    async def test_enqueue_batch_with_delay_delays_every_task(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "batch_enqueue")
        tasks = [new_task(queue) for _ in range(3)]
        assert await storage.enqueue_batch(tasks, delay=FAR_FUTURE) == [True] * 3
        assert await storage.claim_due(queue, 10, LONG_LEASE) == []

    @pytest.mark.asyncio
    async def test_enqueue_batch_with_an_id_conflict_admits_none(
        self, storage: Storage, queue: str, other_queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "batch_enqueue")
        elsewhere = new_task(other_queue)
        await storage.enqueue(elsewhere)
        fresh = [new_task(queue) for _ in range(3)]
        with pytest.raises(IDConflict) as caught:
            await storage.enqueue_batch([fresh[0], new_task(queue, elsewhere.id), *fresh[1:]])
        assert caught.value.task_id == elsewhere.id
        assert caught.value.existing_queue == other_queue
        for task in fresh:
            with pytest.raises(NotFound):
                await storage.get(task.id)
        assert (await storage.stats(queue)).pending == 0

    @pytest.mark.asyncio
    async def test_enqueue_batch_with_an_invalid_task_admits_none(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "batch_enqueue")
        fresh = [new_task(queue) for _ in range(3)]
        broken = new_task(queue, handler_ref="")
        with pytest.raises(ValidationError) as caught:
            await storage.enqueue_batch([*fresh, broken])
        assert caught.value.field == "handler_ref"
        assert (await storage.stats(queue)).pending == 0
        for task, field in (
            (new_task(queue, payload=nested(5000)), "payload"),
            (new_task(queue, retry=RetryOverride(max_attempts="3")), "retry.max_attempts"),  # type: ignore[arg-type]
        ):
            with pytest.raises(ValidationError) as caught:
                await storage.enqueue_batch([*fresh, task])
            assert caught.value.field == field
        assert (await storage.stats(queue)).pending == 0

    @pytest.mark.asyncio
    async def test_complete_many_completes_every_claim_with_its_attempt(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "batch_complete")
        tasks = [new_task(queue) for _ in range(4)]
        for task in tasks:
            await storage.enqueue(task)
        claims = await storage.claim_due(queue, 10, LONG_LEASE)
        assert len(claims) == 4
        done = [
            Completion(c.task.id, c.token, attempt(1, Outcome.SUCCEEDED, worker_id=f"w{i}"))
            for i, c in enumerate(claims)
        ]
        assert await storage.complete_many(done) == [None] * 4
        for item in done:
            stored = await storage.get(item.task_id)
            assert stored.status == Status.SUCCEEDED
            assert stored.attempt_count == 1
            assert stored.completed_at is not None
            assert stored.lease_expires_at is None
            assert stored.attempts == [item.attempt]

    @pytest.mark.asyncio
    async def test_complete_many_fences_each_item_on_its_own_token(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "batch_complete")
        for _ in range(2):
            await storage.enqueue(new_task(queue))
        fresh, stale = await storage.claim_due(queue, 2, LONG_LEASE)
        before = snapshot(await storage.get(stale.task.id))
        ok = attempt(1, Outcome.SUCCEEDED)
        results = await storage.complete_many(
            [
                Completion(fresh.task.id, fresh.token, ok),
                Completion(stale.task.id, stale.token + "-not-current", ok),
                Completion(f"{queue}-never-enqueued", fresh.token, ok),
            ]
        )
        assert len(results) == 3
        assert results[0] is None
        assert isinstance(results[1], StaleClaim)
        assert isinstance(results[2], NotFound)
        assert (await storage.get(fresh.task.id)).status == Status.SUCCEEDED
        assert snapshot(await storage.get(stale.task.id)) == before, "a stale item changes nothing"

    @pytest.mark.asyncio
    async def test_complete_many_applies_an_id_given_twice_once(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        """As ``complete`` called once per item in order: the later item finds the claim
        already resolved (``StaleClaim``), and the task gets one attempt record."""
        require_capability(capabilities, "batch_complete")
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        first, second = (
            attempt(1, Outcome.SUCCEEDED, worker_id="w1"),
            attempt(1, Outcome.SUCCEEDED, worker_id="w2"),
        )
        results = await storage.complete_many(
            [
                Completion(claimed.task.id, claimed.token, first),
                Completion(claimed.task.id, claimed.token, second),
            ]
        )
        assert results[0] is None
        assert isinstance(results[1], StaleClaim)
        stored = await storage.get(claimed.task.id)
        assert stored.status == Status.SUCCEEDED
        assert stored.attempt_count == 1
        assert stored.attempts == [first]

    @pytest.mark.asyncio
    async def test_complete_many_with_a_reclaimed_token_is_stale_and_the_new_holder_keeps_it(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "batch_complete")
        await storage.enqueue(new_task(queue))
        lost = await claim_one(storage, queue, SHORT_LEASE)
        holder = await reclaim_after_expiry(storage, queue)
        [result] = await storage.complete_many(
            [Completion(lost.task.id, lost.token, attempt(1, Outcome.SUCCEEDED))]
        )
        assert isinstance(result, StaleClaim)
        assert (await storage.get(holder.task.id)).status == Status.IN_FLIGHT
        ok = attempt(2, Outcome.SUCCEEDED)
        assert await storage.complete_many([Completion(holder.task.id, holder.token, ok)]) == [None]

    @pytest.mark.asyncio
    async def test_complete_many_with_invalid_input_changes_nothing(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "batch_complete")
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        before = snapshot(await storage.get(claimed.task.id))
        ok = attempt(1, Outcome.SUCCEEDED)
        with pytest.raises(ValidationError):
            await storage.complete_many(
                [Completion(claimed.task.id, claimed.token, ok), Completion("", "t", ok)]
            )
        assert snapshot(await storage.get(claimed.task.id)) == before
