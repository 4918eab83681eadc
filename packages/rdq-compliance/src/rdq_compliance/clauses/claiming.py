"""Claiming: no double claim, due-ness by the storage clock, claim order and limits."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import Counter, defaultdict
from datetime import datetime, timedelta

import pytest

from rdq import open_storage
from rdq.spi import Outcome, Status, Storage
from rdq_compliance._fixtures import require_url
from rdq_compliance._support import (
    FAR_FUTURE,
    LONG_LEASE,
    PATIENCE,
    SHORT_LEASE,
    attempt,
    claim_one,
    claim_time,
    clock_passes,
    eventually,
    new_task,
)

__all__ = ["ClaimingClauses"]

CLAIMANTS = 8
CONNECTIONS = 4


class ClaimingClauses:
    """No two claimants ever hold valid leases on the same task; a task is due by the
    storage's clock; claims come oldest-due first and honour ``limit``."""

    @pytest.mark.asyncio
    async def test_no_double_claim_under_concurrent_claimants(
        self, storage: Storage, queue: str
    ) -> None:
        ids = [new_task(queue).id for _ in range(60)]
        for task_id in ids:
            await storage.enqueue(new_task(queue, task_id))

        async def claimant() -> list[str]:
            mine: list[str] = []
            for _ in range(len(ids) + 1):  # a sound store runs dry long before that
                claimed = await storage.claim_due(queue, 3, LONG_LEASE)
                if not claimed:
                    break
                mine.extend(c.task.id for c in claimed)
                await asyncio.sleep(0)
            return mine

        results = await asyncio.gather(*(claimant() for _ in range(CLAIMANTS)))
        claims = Counter(task_id for mine in results for task_id in mine)
        doubles = {task_id: n for task_id, n in claims.items() if n > 1}
        assert not doubles, f"tasks claimed more than once while leased: {doubles}"
        assert set(claims) == set(ids), "every due task is claimed exactly once"

    @pytest.mark.asyncio
    async def test_no_double_claim_across_separate_connections(
        self, storage: Storage, peer_storage_url: str | None, queue: str
    ) -> None:
        # `storage` is requested so the schema exists; the peers reach the same data by URL.
        url = require_url(peer_storage_url, "peer_storage_url (or storage_url)")
        async with open_storage(url) as feeder:
            ids = [new_task(queue).id for _ in range(60)]
            for task_id in ids:
                await feeder.enqueue(new_task(queue, task_id))
        start = threading.Barrier(CONNECTIONS)

        async def claimant() -> list[str]:
            mine: list[str] = []
            async with open_storage(url) as peer:
                await asyncio.to_thread(start.wait, PATIENCE)
                for _ in range(len(ids) + 1):  # a sound store runs dry long before that
                    claimed = await peer.claim_due(queue, 2, LONG_LEASE)
                    if not claimed:
                        break
                    mine.extend(c.task.id for c in claimed)
            return mine

        def in_own_thread() -> list[str]:
            return asyncio.run(claimant())

        results = await asyncio.gather(
            *(asyncio.to_thread(in_own_thread) for _ in range(CONNECTIONS))
        )
        claims = Counter(task_id for mine in results for task_id in mine)
        doubles = {task_id: n for task_id, n in claims.items() if n > 1}
        assert not doubles, f"tasks claimed by two connections while leased: {doubles}"
        assert set(claims) == set(ids), "every due task is claimed exactly once"

    @pytest.mark.asyncio
    async def test_no_overlapping_leases_when_expired_leases_are_reclaimed(
        self, storage: Storage, queue: str
    ) -> None:
        ids = [new_task(queue).id for _ in range(6)]
        for task_id in ids:
            await storage.enqueue(new_task(queue, task_id))
        # (claimed at, lease expires at) by the storage clock, per task
        leases: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
        done = asyncio.Event()

        async def claimant() -> None:
            while not done.is_set():
                for claimed in await storage.claim_due(queue, 2, SHORT_LEASE):
                    expires = claimed.task.lease_expires_at
                    assert expires is not None
                    leases[claimed.task.id].append((claim_time(claimed, SHORT_LEASE), expires))
                if all(len(leases[task_id]) >= 2 for task_id in ids):
                    done.set()
                await asyncio.sleep(0.02)

        claimants = [asyncio.create_task(claimant()) for _ in range(4)]

        async def each_task_reclaimed() -> bool | None:
            for finished in (c for c in claimants if c.done()):
                finished.result()  # a claimant's failure ends the wait at once
            return True if done.is_set() else None

        try:
            await eventually(each_task_reclaimed, "every task to be claimed twice")
        finally:
            done.set()
            await asyncio.gather(*claimants)
        for task_id, intervals in leases.items():
            intervals.sort()
            for (_, expired), (reclaimed, _) in itertools.pairwise(intervals):
                assert reclaimed >= expired, (
                    f"task {task_id} was claimed again at {reclaimed} while the lease "
                    f"until {expired} was still valid"
                )

    @pytest.mark.asyncio
    async def test_claim_skips_tasks_with_a_valid_lease(self, storage: Storage, queue: str) -> None:
        await storage.enqueue(new_task(queue))
        await claim_one(storage, queue)
        assert await storage.claim_due(queue, 10, LONG_LEASE) == []

    @pytest.mark.asyncio
    async def test_claim_sets_in_flight_with_a_lease_by_the_storage_clock_and_a_fresh_token(
        self, storage: Storage, queue: str
    ) -> None:
        lease = timedelta(minutes=7)
        ids = [new_task(queue).id for _ in range(5)]
        for task_id in ids:
            await storage.enqueue(new_task(queue, task_id))
        claimed = await storage.claim_due(queue, 10, lease)
        assert sorted(c.task.id for c in claimed) == sorted(ids)
        tokens = [c.token for c in claimed]
        assert all(isinstance(t, str) and t for t in tokens), "tokens are non-empty strings"
        assert len(set(tokens)) == len(tokens), "each claim gets its own token"
        for c in claimed:
            stored = await storage.get(c.task.id)
            assert c.task.status == stored.status == Status.IN_FLIGHT
            assert c.task.lease_expires_at == stored.lease_expires_at
            assert stored.created_at is not None
            assert claim_time(c, lease) >= stored.created_at, (
                "lease_expires_at - lease is the claim time, which cannot precede created_at"
            )

    @pytest.mark.asyncio
    async def test_claim_gives_a_new_token_to_each_claim_of_the_same_task(
        self, storage: Storage, queue: str
    ) -> None:
        task = new_task(queue)
        await storage.enqueue(task)
        tokens = []
        for number in (1, 2, 3):
            claimed = await claim_one(storage, queue)
            tokens.append(claimed.token)
            due_again = claim_time(claimed, LONG_LEASE) - timedelta(seconds=1)
            await storage.reschedule(task.id, claimed.token, attempt(number), due_again)
        assert len(set(tokens)) == 3, f"a token was handed out twice: {tokens}"

    @pytest.mark.asyncio
    async def test_claim_skips_tasks_not_yet_due_by_the_storage_clock(
        self, storage: Storage, queue: str
    ) -> None:
        now = await storage.now()
        await storage.enqueue(new_task(queue), delay=FAR_FUTURE)
        await storage.enqueue(new_task(queue, next_attempt_at=now + timedelta(hours=1)))
        assert await storage.claim_due(queue, 10, LONG_LEASE) == []
        assert (await storage.stats(queue)).pending == 2

    @pytest.mark.asyncio
    async def test_claim_takes_tasks_whose_next_attempt_at_has_passed_by_the_storage_clock(
        self, storage: Storage, queue: str
    ) -> None:
        now = await storage.now()
        task = new_task(queue, next_attempt_at=now - timedelta(seconds=1))
        await storage.enqueue(task)
        claimed = await claim_one(storage, queue)
        assert claimed.task.id == task.id
        assert claim_time(claimed, LONG_LEASE) >= now - timedelta(seconds=1)

    @pytest.mark.asyncio
    async def test_delayed_task_is_claimed_only_once_the_storage_clock_reaches_it(
        self, storage: Storage, queue: str
    ) -> None:
        task = new_task(queue)
        await storage.enqueue(task, delay=timedelta(seconds=0.4))
        due = (await storage.get(task.id)).next_attempt_at
        assert due is not None

        async def probe() -> list[datetime] | None:
            claimed = await storage.claim_due(queue, 1, LONG_LEASE)
            return [claim_time(c, LONG_LEASE) for c in claimed] or None

        (claimed_at,) = await eventually(probe, "the delayed task to become due")
        assert claimed_at >= due, f"claimed at {claimed_at}, before it was due at {due}"

    @pytest.mark.asyncio
    async def test_due_ness_is_decided_at_microsecond_precision(
        self, storage: Storage, queue: str
    ) -> None:
        """Checked at a sub-second phase chosen here, not left to chance: a task due at
        ``S.9`` is looked at from ``S.05`` (a store comparing whole seconds claims it early)
        and one due at ``S+1.1`` right after that passes (one rounding up claims it late)."""
        now = await storage.now()
        second = now.replace(microsecond=0) + timedelta(seconds=1)
        early = new_task(queue, next_attempt_at=second + timedelta(microseconds=900_000))
        late = new_task(queue, next_attempt_at=second + timedelta(seconds=1, microseconds=100_000))
        for task in (early, late):
            await storage.enqueue(task)
        await clock_passes(storage, second + timedelta(microseconds=50_000))
        claimed = await storage.claim_due(queue, 5, LONG_LEASE)
        looked = await storage.now()
        assert early.next_attempt_at is not None and late.next_attempt_at is not None
        for c in claimed:
            due = early.next_attempt_at if c.task.id == early.id else late.next_attempt_at
            assert due <= looked, f"claimed a task due at {due} before {looked}"
        now = await clock_passes(storage, late.next_attempt_at)
        claimed += await storage.claim_due(queue, 5, LONG_LEASE)
        assert {c.task.id for c in claimed} == {early.id, late.id}, (
            f"both tasks are due by {now}: a store that rounds due times up claims them late"
        )

    @pytest.mark.asyncio
    async def test_claim_order_is_oldest_due_first(self, storage: Storage, queue: str) -> None:
        now = await storage.now()
        by_age = {minutes: new_task(queue) for minutes in (3, 9, 1, 7, 5)}
        for minutes, task in by_age.items():
            task.next_attempt_at = now - timedelta(minutes=minutes)
            await storage.enqueue(task)
        await storage.enqueue(new_task(queue), delay=FAR_FUTURE)
        oldest_first = [by_age[m].id for m in sorted(by_age, reverse=True)]

        first_two = await storage.claim_due(queue, 2, LONG_LEASE)
        assert {c.task.id for c in first_two} == set(oldest_first[:2])
        rest = [(await claim_one(storage, queue)).task.id for _ in oldest_first[2:]]
        assert rest == oldest_first[2:]

    @pytest.mark.asyncio
    async def test_claim_due_honours_limit(self, storage: Storage, queue: str) -> None:
        for _ in range(7):
            await storage.enqueue(new_task(queue))
        sizes = [len(await storage.claim_due(queue, 3, LONG_LEASE)) for _ in range(4)]
        assert sizes == [3, 3, 1, 0]

    @pytest.mark.asyncio
    async def test_one_claim_takes_a_task_once_even_if_its_new_lease_ends_during_the_call(
        self, storage: Storage, queue: str
    ) -> None:
        ids = sorted(new_task(queue).id for _ in range(3))
        for task_id in ids:
            await storage.enqueue(new_task(queue, task_id))
        # a lease that ends at once: a store that claimed task by task, each at its own
        # "now", would find the first task due again before the batch is full
        claimed = await storage.claim_due(queue, 10, timedelta(microseconds=1))
        assert sorted(c.task.id for c in claimed) == ids, "each due task, each exactly once"

    @pytest.mark.asyncio
    async def test_claim_due_on_an_empty_queue_returns_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        assert await storage.claim_due(queue, 5, LONG_LEASE) == []

    @pytest.mark.asyncio
    async def test_claim_never_takes_tasks_of_another_queue(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        await storage.enqueue(new_task(other_queue))
        assert await storage.claim_due(queue, 5, LONG_LEASE) == []
        assert len(await storage.claim_due(other_queue, 5, LONG_LEASE)) == 1

    @pytest.mark.asyncio
    async def test_claim_skips_succeeded_and_dead_tasks(self, storage: Storage, queue: str) -> None:
        for _ in range(2):
            await storage.enqueue(new_task(queue))
        first, second = await storage.claim_due(queue, 2, SHORT_LEASE)
        await storage.complete(first.task.id, first.token, attempt(1, Outcome.SUCCEEDED))
        await storage.dead_letter(second.task.id, second.token, attempt(1, Outcome.PERMANENT))
        # even once the storage clock is past the short leases, nothing is due
        assert first.task.lease_expires_at is not None
        assert second.task.lease_expires_at is not None
        await clock_passes(storage, max(first.task.lease_expires_at, second.task.lease_expires_at))
        assert await storage.claim_due(queue, 5, LONG_LEASE) == []
