"""The circuit breaker, with the default settings, on simulated time: a dependency that is down
costs its tasks no attempts and gets few calls, a flaky one never trips it, a healthy handler
beside it keeps its pace, and N workers probe with one bounded total."""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any

import msgspec
import pytest

import rdq
from rdq import flow, retry
from rdq.spi import Outcome, Page, Status, Storage, TaskFilter
from rdq_compliance.testing import FaultyStorage

from ._virtual import until, virtual_store, worker

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


class Service:
    """A dependency that refuses connections until ``up_at`` (loop time), and counts calls."""

    def __init__(self, up_at: float) -> None:
        self.up_at = up_at
        self.calls: Counter[str] = Counter()

    async def call(self) -> None:
        await asyncio.sleep(0.01)
        if asyncio.get_running_loop().time() < self.up_at:
            self.calls["down"] += 1
            raise ConnectionRefusedError(111, "Connection refused")
        self.calls["up"] += 1


def outage_app(service: Service) -> rdq.App:
    app = rdq.App()
    app.queue("q", max_attempts=5, backoff=rdq.Backoff.exponential(base=1, cap=10))

    @app.handler("call", queue="q")
    async def call(payload: object) -> None:
        await service.call()

    return app


async def drained(storage: Storage, queue: str = "q") -> float:
    """The loop time once nothing of ``queue`` is pending or in flight."""
    loop = asyncio.get_running_loop()
    while True:
        stats = await storage.stats(queue)
        if stats.pending == 0 and stats.in_flight == 0:
            return loop.time()
        await asyncio.sleep(0.5)


async def every_task(storage: Storage, status: Status, queue: str = "q") -> list[Any]:
    tasks, cursor = [], None
    while True:
        page, cursor = await storage.list_tasks(
            queue, TaskFilter(status=status), Page(limit=1000, cursor=cursor, include_attempts=True)
        )
        tasks += page
        if cursor is None:
            return tasks


@pytest.mark.parametrize("outage", [60.0, 10.0], ids=["60s", "10s"])
async def test_an_outage_dead_letters_nothing_and_costs_no_attempt(outage: float) -> None:
    """2,000 tasks, two workers of ten, a service down for the first ``outage`` seconds: the
    breaker trips within seconds, at most a few dozen calls reach the dead service, nothing is
    dead-lettered, every task succeeds within a minute of the service coming back, and none
    has used an attempt for the outage."""
    service = Service(up_at=outage)
    app = outage_app(service)
    async with virtual_store() as storage:
        await rdq.Client(storage, app).submit_many([rdq.Submission("call", i) for i in range(2000)])
        async with AsyncExitStack() as stack:
            for _ in range(2):
                await stack.enter_async_context(worker(app, storage))
            done = await drained(storage)
        stats = await storage.stats("q")
        (control,) = await storage.list_controls("q")
        succeeded = await every_task(storage, Status.SUCCEEDED)
    assert stats.dlq_depth == 0
    assert stats.succeeded == len(succeeded) == 2000
    assert service.calls["down"] <= 60, f"{service.calls['down']} calls reached the dead service"
    assert done - outage <= 60.0, f"the last task succeeded {done - outage:.0f}s after recovery"
    outages = flow.breaker_of(control).outages
    assert outages and outages[-1].end is not None, "the breaker closed again"
    charged = Counter(retry.attempts_used(t, t.attempt_count, outages) for t in succeeded)
    assert charged == {1: 2000}, f"attempts used for the outage: {charged}"


async def test_a_flaky_dependency_never_trips_the_breaker() -> None:
    """One call in ten fails with a ConnectionError: retried as usual, the breaker stays
    closed."""
    app = rdq.App()
    app.queue("q", max_attempts=10, backoff=rdq.Backoff.fixed(0.5))
    rolls = iter([i % 10 == 3 for i in range(100_000)])

    @app.handler("flaky", queue="q")
    async def flaky(payload: object) -> None:
        await asyncio.sleep(0.01)
        if next(rolls):
            raise ConnectionError("connection reset by peer")

    async with virtual_store() as storage:
        await rdq.Client(storage, app).submit_many(
            [rdq.Submission("flaky", i) for i in range(1000)]
        )
        async with worker(app, storage):
            await drained(storage)
        stats = await storage.stats("q")
        controls = await storage.list_controls("q")
    assert stats.succeeded == 1000 and stats.dlq_depth == 0
    trips = [c for c in controls if flow.breaker_of(c).trips or flow.breaker_of(c).outages]
    assert trips == [], f"a flaky dependency tripped the breaker: {trips}"


async def test_a_healthy_handler_keeps_its_pace_while_its_neighbour_is_held() -> None:
    """Handler ``a`` calls a service that is down; handler ``b`` of the same queue calls one
    that is up: ``b`` finishes as fast as it does with no outage at all."""

    async def run(a_down: bool) -> float:
        service_a = Service(up_at=3600.0 if a_down else 0.0)
        app = rdq.App()
        app.queue("q", max_attempts=5, backoff=rdq.Backoff.exponential(base=1, cap=10))

        @app.handler("a", queue="q")
        async def a(payload: object) -> None:
            await service_a.call()

        @app.handler("b", queue="q")
        async def b(payload: object) -> None:
            await asyncio.sleep(0.01)

        loop = asyncio.get_running_loop()
        async with virtual_store() as storage:
            client = rdq.Client(storage, app)
            await client.submit_many([rdq.Submission("a", i) for i in range(500)])
            await client.submit_many([rdq.Submission("b", i) for i in range(1000)])
            start = loop.time()
            async with worker(app, storage):

                async def b_done() -> bool:
                    return (await storage.stats("q")).succeeded >= (1000 if a_down else 1500)

                return await until(b_done, 0.1) - start

    healthy = await run(a_down=False)
    beside_an_outage = await run(a_down=True)
    assert beside_an_outage <= healthy * 1.1 + 1.0, (healthy, beside_an_outage)


async def test_four_workers_probe_a_half_open_breaker_with_one_bounded_total() -> None:
    """Each half-open window lets ``probes`` (3) claims through, however many workers."""
    service = Service(up_at=3600.0)
    app = outage_app(service)
    async with virtual_store() as storage:
        await rdq.Client(storage, app).submit_many([rdq.Submission("call", i) for i in range(400)])
        async with AsyncExitStack() as stack:
            for _ in range(4):
                await stack.enter_async_context(worker(app, storage))

            async def trips() -> int:
                return flow.breaker_of(next(iter(await storage.list_controls("q")), None)).trips

            async def reopened(after: int) -> bool:
                return await trips() > after

            await until(lambda: reopened(3))  # tripped, then three failed half-open windows
            before, seen = service.calls["down"], await trips()
            await until(lambda: reopened(seen))  # the next half-open window, failed too
            probes = service.calls["down"] - before
    assert probes <= rdq.Breaker().probes, f"{probes} probes in one half-open window"
    assert probes >= 1


async def test_without_shared_controls_each_worker_holds_its_tasks_itself() -> None:
    """A store without the ``control`` capability: the breaker is the worker's own, and the
    tasks it claims while it is open are rescheduled DEFERRED without their handler being
    called, using up no attempt."""
    service = Service(up_at=3600.0)
    app = outage_app(service)
    async with virtual_store() as memory:
        storage = FaultyStorage(memory, capabilities={"control": False})
        await rdq.Client(storage, app).submit_many([rdq.Submission("call", i) for i in range(200)])
        async with worker(app, storage):
            await asyncio.sleep(120)
        pending = await every_task(memory, Status.PENDING)
        assert await memory.list_controls("q") == [], "nothing is shared"
    assert len(pending) == 200, "nothing dead-lettered"
    assert service.calls["down"] <= 80, service.calls
    deferred = Counter(a.outcome for t in pending for a in t.attempts)
    assert deferred[Outcome.DEFERRED] > 0, deferred
    assert all(
        a.error_type in ("ConnectionRefusedError", "rdq.BreakerOpen", "rdq.DependencyFailing")
        for t in pending
        for a in t.attempts
    )


async def test_with_the_breaker_off_every_failure_is_charged() -> None:
    service = Service(up_at=3600.0)
    app = rdq.App()
    app.queue("q", max_attempts=3, backoff=rdq.Backoff.fixed(1.0), breaker=False)

    @app.handler("call", queue="q")
    async def call(payload: object) -> None:
        await service.call()

    async with virtual_store() as storage:
        await rdq.Client(storage, app).submit_many([rdq.Submission("call", i) for i in range(50)])
        async with worker(app, storage):
            await drained(storage)
        stats = await storage.stats("q")
        assert await storage.list_controls("q") == []
    assert stats.dlq_depth == 50 and service.calls["down"] == 150


async def test_an_outage_beside_a_healthy_handler_ends_with_every_task_done() -> None:
    """The outage scenario with a healthy handler's tasks mixed in, on two workers: whichever
    worker the store lets a probe through to runs it, even when its view of the breaker is a
    refresh behind (still open), so the breaker closes once the service is back."""
    service = Service(up_at=60.0)
    app = outage_app(service)

    @app.handler("healthy", queue="q")
    async def healthy(payload: object) -> None:
        await asyncio.sleep(0.01)

    async with virtual_store() as storage:
        client = rdq.Client(storage, app)
        await client.submit_many(
            [rdq.Submission("call" if i % 2 else "healthy", i) for i in range(4000)]
        )
        async with AsyncExitStack() as stack:
            for _ in range(2):
                await stack.enter_async_context(worker(app, storage))
            done = await drained(storage)
        stats = await storage.stats("q")
    assert stats.dlq_depth == 0 and stats.succeeded == 4000
    assert done - 60.0 <= 60.0, f"the last task succeeded {done - 60:.0f}s after recovery"


async def test_a_half_open_breaker_whose_probes_never_came_back_probes_again() -> None:
    """The probes were taken by a worker that died: once the probe window has passed, the
    next worker lets ``probes`` more through, and the breaker closes on their success."""
    service = Service(up_at=0.0)
    app = outage_app(service)
    async with virtual_store() as storage:
        await rdq.Client(storage, app).submit_many([rdq.Submission("call", i) for i in range(50)])
        now = await storage.now()
        opened = flow.trip(
            rdq.spi.Control(queue="q", key="handler:call"),
            now,
            rdq.Breaker(cooldown=0),
            started=now,
            error_types=["ConnectionRefusedError"],
            error_type="ConnectionRefusedError",
            error_message="refused",
            sample_task=None,
        )
        probing = flow.begin_probing(opened, now, rdq.Breaker(cooldown=0))
        assert probing is not None
        await storage.put_control(msgspec.structs.replace(probing, gate=0), expected_version=0)
        async with worker(app, storage):
            done = await drained(storage)
        (control,) = await storage.list_controls("q")
    assert flow.breaker_of(control).state is flow.State.CLOSED
    window = flow.probe_window(rdq.Breaker())
    assert window <= done <= window + rdq.Breaker().ramp + 10.0, done
