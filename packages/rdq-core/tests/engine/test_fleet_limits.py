"""Limits that hold across the fleet, on the memory store and PostgreSQL, with several workers
as a user runs them: at most N tasks of a key run at once however many workers claim (a
queue's, a handler's, a named key's, each value's of a per-value key); the workers write the
declared limits and follow a change of them; two submitters of a new value create one record;
a dead worker's slots come back within one lease."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest

import rdq
from rdq import flow
from rdq.spi import Control, Envelope, Storage
from rdq_compliance.testing import eventually

from .conftest import fast_worker, running

pytestmark = pytest.mark.asyncio

WORKERS = 3


class Gauge:
    """How many handlers run at once, per group and in all, and the most seen."""

    def __init__(self) -> None:
        self.now: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()

    async def run(self, *groups: str, seconds: float = 0.03) -> None:
        for group in (*groups, "all"):
            self.now[group] += 1
            self.peak[group] = max(self.peak[group], self.now[group])
        try:
            await asyncio.sleep(seconds)
        finally:
            for group in (*groups, "all"):
                self.now[group] -= 1


@asynccontextmanager
async def workers(app: rdq.App, storage: Storage, count: int = WORKERS) -> AsyncIterator[None]:
    async with AsyncExitStack() as stack:
        for _ in range(count):
            await stack.enter_async_context(running(fast_worker(app, storage, poll_min=0.01)))
        yield


async def drained(storage: Storage, queue: str, total: int, patience: float = 60.0) -> None:
    async def done() -> bool:
        return (await storage.stats(queue)).succeeded == total

    await eventually(done, f"{total} tasks of {queue} succeeded", patience)


async def controls(storage: Storage, queue: str) -> dict[str, Control]:
    return {c.key: c for c in await storage.list_controls(queue)}


def tenant(task: Envelope) -> object:
    return task.payload["tenant"]


async def test_a_named_key_runs_at_most_its_limit_at_once_across_workers(
    storage: Storage, queue: str
) -> None:
    gauge = Gauge()
    app = rdq.App()
    app.queue(queue, concurrency=10, limits=[rdq.Concurrency(3, key="psp")])

    @app.handler("pay", queue=queue)
    async def pay(payload: object) -> None:
        await gauge.run()

    await rdq.Client(storage, app).submit_many([rdq.Submission("pay", i) for i in range(60)])
    async with workers(app, storage):
        await drained(storage, queue, 60)
    assert gauge.peak["all"] == 3, f"3 slots fleet-wide, {gauge.peak['all']} ran at once"
    psp = (await controls(storage, queue))["limit:psp"]
    assert (psp.concurrency, psp.in_use) == (3, 0), "every slot came back"


async def test_each_value_of_a_per_value_key_has_its_own_limit(
    storage: Storage, queue: str
) -> None:
    gauge = Gauge()
    app = rdq.App()
    app.queue(queue, concurrency=10)

    @app.handler("sync", queue=queue, limits=[rdq.Concurrency(2, key=tenant, name="tenant")])
    async def sync(payload: dict[str, str]) -> None:
        await gauge.run(payload["tenant"])

    tenants = ["acme", "globex", "initech corp", "umbrella"]
    await rdq.Client(storage, app).submit_many(
        [rdq.Submission("sync", {"tenant": t}) for t in tenants for _ in range(15)]
    )
    found = await controls(storage, queue)
    assert sorted(found) == sorted(f"limit:tenant:{t.replace(' ', '%20')}" for t in tenants)
    assert {c.concurrency for c in found.values()} == {2}, "created before the first task"
    async with workers(app, storage):
        await drained(storage, queue, 60)
    assert {t: gauge.peak[t] for t in tenants} == dict.fromkeys(tenants, 2)
    assert gauge.peak["all"] <= 8


async def test_a_queue_and_a_handler_limit_hold_for_tasks_submitted_before_they_existed(
    storage: Storage, queue: str
) -> None:
    """The queue's and a handler's keys are every task's: no key is needed at submit."""
    gauge = Gauge()
    plain = rdq.App()
    plain.queue(queue)
    plain.register("a", lambda: None, queue=queue)
    plain.register("b", lambda: None, queue=queue)
    await rdq.Client(storage, plain).submit_many(
        [rdq.Submission(h, i) for h in ("a", "b") for i in range(20)]
    )
    app = rdq.App()
    app.queue(queue, concurrency=10, limits=[rdq.Concurrency(5)])

    @app.handler("a", queue=queue, limits=[rdq.Concurrency(2)])
    async def a(payload: object) -> None:
        await gauge.run("a")

    @app.handler("b", queue=queue)
    async def b(payload: object) -> None:
        await gauge.run("b")

    async with workers(app, storage):
        await drained(storage, queue, 40)
    assert gauge.peak["a"] == 2 and gauge.peak["all"] == 5, dict(gauge.peak)
    found = await controls(storage, queue)
    assert (found["*"].concurrency, found["handler:a"].concurrency) == (5, 2)
    declared = flow.limit_of(found["*"])
    assert declared is not None and declared.by != "client", "written by a worker"


async def test_submitters_racing_on_a_new_value_create_one_record_and_every_task_has_it(
    storage: Storage, queue: str
) -> None:
    app = rdq.App()
    app.queue(queue, limits=[rdq.Concurrency(4, key=tenant, name="tenant")])
    app.register("h", lambda: None, queue=queue)
    clients = [rdq.Client(storage, app) for _ in range(12)]
    subs = await asyncio.gather(*(c.submit("h", {"tenant": "new"}) for c in clients))
    (control,) = await storage.list_controls(queue)
    assert (control.key, control.concurrency, control.version) == ("limit:tenant:new", 4, 1)
    for sub in subs:
        assert (await storage.get(sub.id)).keys == ["limit:tenant:new"]
    again = await clients[0].submit("h", {"tenant": "new"})
    assert (await storage.get(again.id)).keys == ["limit:tenant:new"]
    assert (await storage.list_controls(queue))[0].version == 1, "a known value costs no call"


async def test_a_worker_follows_a_change_of_its_limits_and_lifts_one_no_longer_declared(
    storage: Storage, queue: str
) -> None:
    app = rdq.App()
    app.queue(
        queue, limits=[rdq.Concurrency(5, key="psp"), rdq.Concurrency(2, key=tenant, name="t")]
    )
    app.register("h", lambda: None, queue=queue)
    stale = rdq.App()  # a submitter of an older release: it declares 3 per value
    stale.queue(queue, limits=[rdq.Concurrency(3, key=tenant, name="t")])
    stale.register("h", lambda: None, queue=queue)
    await rdq.Client(storage, stale).submit("h", {"tenant": "x"}, delay=3600)
    assert (await controls(storage, queue))["limit:t:x"].concurrency == 3
    async with running(fast_worker(app, storage)):

        async def declared(expected: dict[str, int]) -> bool:
            found = await controls(storage, queue)
            return {k: c.concurrency for k, c in found.items()} == expected

        await eventually(lambda: declared({"limit:psp": 5, "limit:t:x": 2}), "the declaration")
        app.queue(queue, limits=[rdq.Concurrency(7, key="psp")])
        await eventually(lambda: declared({"limit:psp": 7}), "the change, the value's lifted")
        app.queue(queue, limits=[])
        await eventually(lambda: declared({}), "every limit lifted")


async def test_a_worker_started_earlier_leaves_a_later_declaration_alone(
    storage: Storage, queue: str
) -> None:
    def app_with(limit: int) -> rdq.App:
        app = rdq.App()
        app.queue(queue, limits=[rdq.Concurrency(limit, key="psp")])
        app.register("h", lambda: None, queue=queue)
        return app

    async with running(fast_worker(app_with(3), storage)):

        async def psp() -> int | None:
            found = (await controls(storage, queue)).get("limit:psp")
            return found.concurrency if found is not None else None

        await eventually(lambda: _is(psp(), 3), "the first worker's declaration")
        async with running(fast_worker(app_with(4), storage)):
            await eventually(lambda: _is(psp(), 4), "the later worker's declaration")
            version = (await controls(storage, queue))["limit:psp"].version
            await asyncio.sleep(2.5)  # two refreshes of each worker
            after = (await controls(storage, queue))["limit:psp"]
            assert (after.concurrency, after.version) == (4, version), "no tug of war"


async def _is(value: Any, expected: object) -> bool:
    return bool(await value == expected)


async def test_the_slots_a_dead_worker_held_come_back_within_one_lease(
    storage: Storage, queue: str
) -> None:
    gauge = Gauge()
    app = rdq.App()
    app.queue(queue, concurrency=20, lease=5.0, limits=[rdq.Concurrency(10, key="psp")])

    @app.handler("pay", queue=queue)
    async def pay(payload: object) -> None:
        await gauge.run()

    await rdq.Client(storage, app).submit_many([rdq.Submission("pay", i) for i in range(30)])
    async with running(fast_worker(app, storage)):
        await eventually(lambda: _is(_in_use(storage, queue), 0), "the worker's declaration")
    lease = timedelta(seconds=1.5)
    dead = await storage.claim_due(queue, 30, lease)  # a worker that dies holding them
    assert len(dead) == 10, "the limit holds for a claim made by hand too"
    expires = dead[0].task.lease_expires_at
    assert expires is not None
    async with running(fast_worker(app, storage, poll_min=0.01)):
        await asyncio.sleep(0.5)
        assert gauge.peak["all"] == 0, "no slot while the dead worker's leases live"
        await drained(storage, queue, 30, patience=30.0)
        first = min(
            t.attempts[-1].started_at
            for t in [await storage.get(c.task.id) for c in dead]
            if t.attempts[-1].started_at is not None
        )
    assert first >= expires, "nothing of the key ran before the leases lapsed"
    assert first - expires < timedelta(seconds=3), f"slots back {first - expires} after lapse"
    assert gauge.peak["all"] == 10


async def _in_use(storage: Storage, queue: str) -> int | None:
    found = (await controls(storage, queue)).get("limit:psp")
    return found.in_use if found is not None else None
