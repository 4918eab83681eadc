"""Limits that hold across the fleet, on the memory store and PostgreSQL, with several workers
as a user runs them: at most N tasks of a key run at once however many workers claim (a
queue's, a handler's, a named key's, each value's of a per-value key); the workers write the
declared limits; two submitters of a new value create one record. How workers follow a change
of the limits over time, and when a dead worker's slots come back, is measured on simulated
time in test_fleet_limits_virtual.py."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

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
