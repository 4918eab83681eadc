"""Whose a control record is (capability ``control``): its own (queue, key)'s — the same key
in another queue is another record — and the whole fleet's: every store instance and every
named worker sees what any other wrote and counts what any other claimed."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from rdq.errors import ControlConflict
from rdq.spi import QUEUE_KEY, Control, Outcome, Storage, handler_key
from rdq_compliance._fixtures import StorageOpener
from rdq_compliance._flow_support import claim_ids, control_of, fill, put, two_stores
from rdq_compliance._gates import needs
from rdq_compliance._support import LONG_LEASE, attempt, new_queue

__all__ = ["ControlScopeClauses"]

PER_HOUR = 3600.0
"""A rate period so long that no bucket refills a whole token while a clause runs."""
WORKERS = ("kit-w1", "kit-w2", None, "kit-w3")
"""Claimants: three named workers and an anonymous one."""


class ControlScopeClauses:
    """A control is its (queue, key)'s alone: the same key in two queues is two records — each
    paused, versioned, counted, gated and refilled apart — and ``list_controls`` lists them by
    queue, then key. It is the whole fleet's: a control written through one store instance
    holds for claims through every other at once, and a limit counts the claims of every
    worker and every store instance together."""

    capability = "control"
    since = 3

    @pytest.mark.asyncio
    async def test_the_same_key_in_two_queues_is_two_controls_that_never_touch(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        mine = await fill(storage, queue, 3, keys=["dep:psp"])
        theirs = await fill(storage, other_queue, 3, keys=["dep:psp"])
        paused = await storage.put_control(
            Control(queue=queue, key="dep:psp", paused=True), expected_version=0
        )
        assert sorted(await claim_ids(storage, other_queue)) == sorted(theirs), (
            "a pause of a key in one queue holds back nothing of another queue"
        )
        limited = await storage.put_control(
            Control(queue=other_queue, key="dep:psp", concurrency=1), expected_version=0
        )
        assert limited.version == 1, "the other queue's record of the key is a record of its own"
        await storage.put_control(
            Control(queue=queue, key="dep:psp", concurrency=2), expected_version=paused.version
        )
        taken = await claim_ids(storage, queue)
        assert len(taken) == 2 and set(taken) <= set(mine), (
            f"2 slots in {queue!r}, whatever another queue's tasks with the key hold: {taken}"
        )
        (here,) = await storage.list_controls(queue)
        (there,) = await storage.list_controls(other_queue)
        assert (here.queue, here.concurrency, here.in_use) == (queue, 2, 2)
        assert (there.queue, there.concurrency, there.in_use) == (other_queue, 1, 3)
        assert await storage.delete_control(other_queue, "dep:psp", expected_version=1)
        assert [(c.queue, c.key) for c in await storage.list_controls(queue)] == [
            (queue, "dep:psp")
        ], "deleting one queue's record of a key leaves the other's"

    @pytest.mark.asyncio
    async def test_gates_and_rate_buckets_of_one_key_in_two_queues_are_apart(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        for name, gate, burst in ((queue, 1, 2), (other_queue, 3, 1)):
            await fill(storage, name, 4, keys=["gated"])
            await fill(storage, name, 4, keys=["api"])
            await storage.put_control(
                Control(queue=name, key="gated", gate=gate), expected_version=0
            )
            await storage.put_control(
                Control(queue=name, key="api", rate=1, per=PER_HOUR, burst=burst),
                expected_version=0,
            )
        mine, theirs = await claim_ids(storage, queue), await claim_ids(storage, other_queue)
        assert len(mine) == 1 + 2, f"{queue!r}: its gate of 1 and its bucket of 2, not {mine}"
        assert len(theirs) == 3 + 1, f"{other_queue!r}: its gate of 3, its bucket of 1"
        gates = {c.queue: c.gate for c in await storage.list_controls() if c.key == "gated"}
        assert (gates.get(queue), gates.get(other_queue)) == (0, 0)

    @pytest.mark.asyncio
    async def test_list_controls_lists_by_queue_then_key(self, storage: Storage) -> None:
        base = new_queue()
        first, second = f"{base}-a", f"{base}-b"
        keys = ["tenant:1", QUEUE_KEY, "dep:b", handler_key("kit.handlers:x"), "dep:a"]
        for name in (second, first):
            for key in keys:
                await storage.put_control(Control(queue=name, key=key), expected_version=0)
        listed = [(c.queue, c.key) for c in await storage.list_controls(first)]
        assert listed == [(first, k) for k in sorted(keys)], "one queue's: by key"
        every = [
            (c.queue, c.key) for c in await storage.list_controls() if c.queue in (first, second)
        ]
        assert every == [(q, k) for q in (first, second) for k in sorted(keys)], (
            "every queue's: by queue, then key"
        )

    @pytest.mark.asyncio
    async def test_a_control_written_through_one_store_holds_for_claims_through_another(
        self, storage: Storage, open_peer_storage: StorageOpener, queue: str
    ) -> None:
        async with two_stores(open_peer_storage) as (writer, claimer):
            warm = await fill(claimer, queue, 1)
            assert await claim_ids(claimer, queue) == warm  # a claim before any control
            held = await fill(writer, queue, 4, keys=["dep:psp"])
            free = await fill(writer, queue, 2)
            paused = await writer.put_control(
                Control(queue=queue, key="dep:psp", paused=True), expected_version=0
            )
            assert sorted(await claim_ids(claimer, queue)) == sorted(free), (
                "a pause written through one store holds for the next claim through another"
            )
            seen = await control_of(claimer, queue, "dep:psp")
            assert seen is not None and (seen.paused, seen.version) == (True, paused.version)
            await writer.put_control(
                Control(queue=queue, key="dep:psp"), expected_version=paused.version
            )
            assert sorted(await claim_ids(claimer, queue)) == sorted(held), (
                "a pause lifted through one store lets the next claim through another take"
            )
            await fill(writer, queue, 3, keys=["dep:psp"])
            await writer.put_control(
                Control(queue=queue, key=QUEUE_KEY, paused=True), expected_version=0
            )
            assert await claim_ids(claimer, queue) == [], "a queue paused through another store"

    @pytest.mark.asyncio
    @needs("claim_holder")
    async def test_a_limit_counts_the_claims_of_every_worker(
        self, storage: Storage, queue: str
    ) -> None:
        limited = await fill(storage, queue, 6, keys=["slots"])
        gated = await fill(storage, queue, 6, keys=["gated"])
        rated = await fill(storage, queue, 6, keys=["api"])
        for control in (
            Control(queue=queue, key="slots", concurrency=3),
            Control(queue=queue, key="gated", gate=2),
            Control(queue=queue, key="api", rate=1, per=PER_HOUR, burst=2),
        ):
            await storage.put_control(control, expected_version=0)
        taken: Counter[str] = Counter()
        for worker in WORKERS:  # one after another: each sees what the others hold
            for task_id in await claim_ids(storage, queue, worker_id=worker):
                key = "slots" if task_id in limited else "gated" if task_id in gated else "api"
                assert task_id in limited + gated + rated
                taken[key] += 1
        assert taken == Counter(slots=3, gated=2, api=2), (
            f"a limit of the fleet, not of each worker: {dict(taken)}"
        )
        in_use = {c.key: c.in_use for c in await storage.list_controls(queue)}
        assert in_use["slots"] == 3

    @pytest.mark.asyncio
    @needs("claim_holder")
    async def test_limits_hold_across_store_instances_and_named_workers(
        self, storage: Storage, open_peer_storage: StorageOpener, queue: str
    ) -> None:
        async with two_stores(open_peer_storage) as (a, b):
            limited = await fill(a, queue, 12, keys=["slots"])
            gated = await fill(a, queue, 12, keys=["gated"])
            rated = await fill(a, queue, 12, keys=["api"])
            for control in (
                Control(queue=queue, key="slots", concurrency=3),
                Control(queue=queue, key="gated", gate=3),
                Control(queue=queue, key="api", rate=1, per=PER_HOUR, burst=2),
            ):
                await a.put_control(control, expected_version=0)

            async def claimant(n: int) -> list[str]:
                store = (a, b)[n % 2]
                mine: list[str] = []
                for _ in range(3):
                    mine += await claim_ids(store, queue, limit=2, worker_id=f"kit-w{n}")
                    await asyncio.sleep(0)
                return mine

            results = await asyncio.gather(*(claimant(n) for n in range(8)))
            claimed = Counter(t for r in results for t in r)
            assert max(claimed.values()) == 1, "no task claimed twice"
            counts = (
                len(set(claimed) & set(limited)),
                len(set(claimed) & set(gated)),
                len(set(claimed) & set(rated)),
            )
            assert counts == (3, 3, 2), (
                f"3 slots, a gate of 3 and a bucket of 2 for the whole fleet, not {counts}"
            )
            for store in (a, b):
                seen = {c.key: c for c in await store.list_controls(queue)}
                assert (seen["slots"].in_use, seen["gated"].gate) == (3, 0)
            running = [t for t in claimed if t in limited]
            held = await b.claim_due(queue, 10, LONG_LEASE, worker_id="kit-w9")
            assert held == [], "every slot is taken, whichever store claims"
            first = await a.get(running[0])
            assert first.claimed_by is not None

    @pytest.mark.asyncio
    async def test_a_slot_freed_through_one_store_is_taken_through_another(
        self, storage: Storage, open_peer_storage: StorageOpener, queue: str
    ) -> None:
        async with two_stores(open_peer_storage) as (a, b):
            await fill(a, queue, 4, keys=["slots"])
            await a.put_control(
                Control(queue=queue, key="slots", concurrency=1), expected_version=0
            )
            (running,) = await a.claim_due(queue, 10, LONG_LEASE)
            assert await b.claim_due(queue, 10, LONG_LEASE) == []
            await a.complete(running.task.id, running.token, attempt(1, Outcome.SUCCEEDED))
            assert len(await b.claim_due(queue, 10, LONG_LEASE)) == 1, "the freed slot"
            assert await a.claim_due(queue, 10, LONG_LEASE) == []

    @pytest.mark.asyncio
    async def test_of_racing_writers_through_two_stores_exactly_one_succeeds(
        self, storage: Storage, open_peer_storage: StorageOpener, queue: str
    ) -> None:
        async with two_stores(open_peer_storage) as (a, b):
            base = await put(a, Control(queue=queue, key="k"))
            assert (await control_of(b, queue, "k")) is not None

            async def writer(n: int) -> int | None:
                try:
                    await (a, b)[n % 2].put_control(
                        Control(queue=queue, key="k", state={"writer": n}),
                        expected_version=base.version,
                    )
                except ControlConflict:
                    return None
                return n

            results = await asyncio.gather(*(writer(n) for n in range(8)))
            winners = [n for n in results if n is not None]
            assert len(winners) == 1, f"exactly one writer of the fleet wins, not {winners}"
            for store in (a, b):
                stored = await control_of(store, queue, "k")
                assert stored is not None
                assert (stored.version, stored.state) == (base.version + 1, {"writer": winners[0]})
