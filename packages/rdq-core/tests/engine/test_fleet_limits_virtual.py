"""Limits across workers, on simulated time: no window of the period sees more than the
rate and its burst, the rate is used, and a handler's ``RetryAfter`` halves an adaptive rate
until its delay has passed, then the declared rate is back; a change of the declared limits
reaches the store within a refresh, and a worker started earlier never undoes a later one's;
the slots a dead worker held come back as its leases lapse."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from datetime import timedelta

import pytest

import rdq
from rdq import flow
from rdq.spi import Envelope, Storage

from ._virtual import until, virtual_store, worker

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

REFRESH = 1.0
"""Seconds between a worker's reads of its queues' control records (rdq's workers refresh
every second): a change of the declared limits reaches the store within that."""


def busiest(starts: list[float], window: float) -> int:
    """The most starts in any window of ``window`` seconds."""
    ordered = sorted(starts)
    best, first = 0, 0
    for last, t in enumerate(ordered):
        while ordered[first] <= t - window:
            first += 1
        best = max(best, last - first + 1)
    return best


async def drained(storage: Storage, total: int) -> float:
    async def done() -> bool:
        return (await storage.stats("q")).succeeded == total

    return await until(done, 0.1)


async def test_a_rate_limit_holds_over_every_window_across_workers_and_is_used() -> None:
    app = rdq.App()
    app.queue("q", concurrency=10, limits=[rdq.Rate(10, per=1.0, burst=2, key="api")])
    starts: list[float] = []

    @app.handler("call", queue="q")
    async def call(payload: object) -> None:
        starts.append(asyncio.get_running_loop().time())
        await asyncio.sleep(0.01)

    async with virtual_store() as storage:
        await rdq.Client(storage, app).submit_many([rdq.Submission("call", i) for i in range(200)])
        async with AsyncExitStack() as stack:
            for _ in range(3):
                await stack.enter_async_context(worker(app, storage))
            await drained(storage, 200)
    span = max(starts) - min(starts)
    assert busiest(starts, 1.0) <= 12, f"{busiest(starts, 1.0)} starts in one second"
    assert 200 / span >= 9.0, f"the limit is used: {200 / span:.1f}/s of 10/s"


async def test_a_retry_after_halves_an_adaptive_rate_until_its_delay_has_passed() -> None:
    app = rdq.App()
    app.queue("q", concurrency=10, limits=[rdq.Rate(20, per=1.0, burst=2, key="api")])
    starts: list[float] = []
    throttled = {"left": 0}

    @app.handler("call", queue="q")
    async def call(payload: object) -> None:
        starts.append(asyncio.get_running_loop().time())
        if throttled["left"] > 0:
            throttled["left"] -= 1
            raise rdq.RetryAfter(10.0, "429 Too Many Requests")
        await asyncio.sleep(0.01)

    async with virtual_store() as storage:
        await rdq.Client(storage, app).submit_many([rdq.Submission("call", i) for i in range(800)])

        async def rate() -> int | None:
            found = {c.key: c for c in await storage.list_controls("q")}.get("limit:api")
            return found.rate if found is not None else None

        async with AsyncExitStack() as stack:
            for _ in range(2):
                await stack.enter_async_context(worker(app, storage))
            loop = asyncio.get_running_loop()
            await asyncio.sleep(3.0)
            throttled["left"] = 1
            lowered_at = await until(lambda: _is(rate(), 10))
            lowered = {c.key: c for c in await storage.list_controls("q")}["limit:api"]
            assert flow.lowered_of(lowered) is not None
            await asyncio.sleep(4.0)
            window = [t for t in starts if lowered_at + 1.0 <= t < lowered_at + 4.0]
            assert busiest(window, 1.0) <= 10 + 2, f"{busiest(window, 1.0)}/s while halved"
            assert len(window) >= 3 * 8, f"the halved rate is used: {len(window)} in 3 s"
            restored_at = await until(lambda: _is(rate(), 20))
            assert 9.0 <= restored_at - lowered_at <= 12.0, "back once the delay has passed"
            await asyncio.sleep(4.0)
            after = [t for t in starts if restored_at + 1.0 <= t < restored_at + 4.0]
            assert len(after) >= 3 * 17, f"the declared rate again: {len(after)} in 3 s"
            assert loop.time() - lowered_at < 60


async def _is(value: object, expected: object) -> bool:
    return bool(await value == expected)  # type: ignore[misc]


def tenant(task: Envelope) -> object:
    return task.payload["tenant"]


async def declared(storage: Storage) -> dict[str, int | None]:
    """The concurrency of each control record of queue ``q``, by key."""
    return {c.key: c.concurrency for c in await storage.list_controls("q")}


async def test_a_worker_follows_a_change_of_its_limits_within_a_refresh() -> None:
    """A worker declares its limits over a submitter's older declaration, and a change of them
    (a value's limit no longer declared is lifted) reaches the store within one refresh."""
    app = rdq.App()
    app.queue("q", limits=[rdq.Concurrency(5, key="psp"), rdq.Concurrency(2, key=tenant, name="t")])
    app.register("h", lambda: None, queue="q")
    stale = rdq.App()  # a submitter of an older release: it declares 3 per value
    stale.queue("q", limits=[rdq.Concurrency(3, key=tenant, name="t")])
    stale.register("h", lambda: None, queue="q")
    loop = asyncio.get_running_loop()
    async with virtual_store() as storage:
        await rdq.Client(storage, stale).submit("h", {"tenant": "x"}, delay=3600)
        assert (await declared(storage))["limit:t:x"] == 3
        async with worker(app, storage):

            async def follows(expected: dict[str, int | None]) -> float:
                changed = loop.time()
                return await until(lambda: _is(declared(storage), expected), 0.01) - changed

            assert await follows({"limit:psp": 5, "limit:t:x": 2}) <= REFRESH + 0.01
            app.queue("q", limits=[rdq.Concurrency(7, key="psp")])
            assert await follows({"limit:psp": 7}) <= REFRESH + 0.01, "the value's lifted"
            app.queue("q", limits=[])
            assert await follows({}) <= REFRESH + 0.01, "every limit lifted"


async def test_a_worker_started_earlier_leaves_a_later_declaration_alone() -> None:
    def app_with(limit: int) -> rdq.App:
        app = rdq.App()
        app.queue("q", limits=[rdq.Concurrency(limit, key="psp")])
        app.register("h", lambda: None, queue="q")
        return app

    async with virtual_store() as storage, worker(app_with(3), storage):
        await until(lambda: _is(psp(storage), 3), 0.01)
        async with worker(app_with(4), storage):
            await until(lambda: _is(psp(storage), 4), 0.01)
            (before,) = await storage.list_controls("q")
            await asyncio.sleep(60 * REFRESH)  # sixty refreshes of each worker
            (after,) = await storage.list_controls("q")
    assert (after.concurrency, after.version) == (4, before.version), "no tug of war"


async def psp(storage: Storage) -> int | None:
    return (await declared(storage)).get("limit:psp")


async def test_the_slots_a_dead_worker_held_come_back_as_its_leases_lapse() -> None:
    """A worker dies holding all ten slots of a limit: nothing of the key runs while its
    leases live, and the next worker takes the slots within one idle poll of their lapse
    (``poll_max``), ten at once, no more."""
    app = rdq.App()
    app.queue("q", concurrency=20, lease=30.0, limits=[rdq.Concurrency(10, key="psp")])
    running = {"now": 0, "peak": 0}

    @app.handler("pay", queue="q")
    async def pay(payload: object) -> None:
        running["now"] += 1
        running["peak"] = max(running["peak"], running["now"])
        await asyncio.sleep(0.03)
        running["now"] -= 1

    async with virtual_store() as storage:
        async with worker(app, storage):
            await until(lambda: _is(psp(storage), 10), 0.01)  # the worker's declaration
        await rdq.Client(storage, app).submit_many([rdq.Submission("pay", i) for i in range(30)])
        dead = await storage.claim_due("q", 30, timedelta(seconds=30))  # a worker that dies
        assert len(dead) == 10, "the limit holds for a claim made by hand too"
        expires = dead[0].task.lease_expires_at
        assert expires is not None
        async with worker(app, storage, poll_max=1.0):
            await asyncio.sleep(29.9)
            assert running["peak"] == 0, "no slot while the dead worker's leases live"
            await drained(storage, 30)
            reruns = [await storage.get(c.task.id) for c in dead]
    first = min(t.attempts[-1].started_at for t in reruns if t.attempts[-1].started_at)
    assert 0.0 <= (first - expires).total_seconds() <= 1.0, f"slots back {first - expires} on"
    assert running["peak"] == 10


async def slots_busy(workers: int, limit: int, tasks: int) -> float:
    """``workers`` workers of ten slots each drain ``tasks`` tasks of 50 ms that share
    ``Concurrency(limit)``: how many handlers ran at once on average, from the first start
    to the last end."""
    app = rdq.App()
    app.queue("q", concurrency=10, limits=[rdq.Concurrency(limit, key="psp")])
    loop = asyncio.get_running_loop()
    spans: list[tuple[float, float]] = []

    @app.handler("pay", queue="q")
    async def pay(payload: object) -> None:
        began = loop.time()
        await asyncio.sleep(0.05)
        spans.append((began, loop.time()))

    async with virtual_store() as storage:
        await rdq.Client(storage, app).submit_many([rdq.Submission("pay", i) for i in range(tasks)])
        async with AsyncExitStack() as stack:
            for _ in range(workers):
                await stack.enter_async_context(worker(app, storage, poll_max=1.0))
            await drained(storage, tasks)
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    return sum(e - s for s, e in spans) / (last - first)


async def test_a_binding_concurrency_limit_keeps_its_slots_busy_with_short_tasks() -> None:
    """Four workers share ``Concurrency(4)``. A slot the store frees when a success is
    recorded is taken again by the next claim at once, not after an idle poll: the handlers
    keep at least 0.9 of the four slots busy on average."""
    busy = await slots_busy(workers=4, limit=4, tasks=400)
    assert busy >= 0.9 * 4, f"{busy:.2f} of 4 slots busy"


async def test_workers_do_not_hold_a_binding_limits_slots_for_tasks_claimed_ahead() -> None:
    """Eight workers share ``Concurrency(20)``. A worker whose claims come back full would
    claim ahead of its free slots, and each task claimed ahead holds one of the 20 while it
    waits for a slot of that worker: none is claimed ahead under a limit that small, and the
    handlers keep at least 0.9 of the 20 busy."""
    busy = await slots_busy(workers=8, limit=20, tasks=3000)
    assert busy >= 0.9 * 20, f"{busy:.2f} of 20 slots busy"
