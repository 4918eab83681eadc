"""The outage shapes a window of outcomes alone does not catch, on simulated time with the
default breaker: a quiet queue whose tasks use up their attempts before any window fills, a
flood of tasks behind a shared dependency that was healthy a moment ago, and a service failing
one call in ten with 503 (which must not trip it). And the bounds: a task failing for a reason
of its own is not held for ever."""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import AsyncExitStack
from datetime import timedelta

import httpx
import pytest

import rdq
from rdq import flow, retry
from rdq.spi import Outcome, Status, Storage

from ._virtual import virtual_store, worker
from .test_breaker import drained, every_task

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


class Dependency:
    """A service down from ``down_from`` to ``up_at`` (loop time), refusing connections; with
    ``bad``, the payloads it always refuses (a task-specific failure, a bad URL)."""

    def __init__(self, down_from: float, up_at: float, bad: frozenset[int] = frozenset()):
        self.down_from, self.up_at, self.bad = down_from, up_at, bad
        self.calls: Counter[str] = Counter()

    async def call(self, n: int) -> None:
        await asyncio.sleep(0.01)
        now = asyncio.get_running_loop().time()
        if n in self.bad or self.down_from <= now < self.up_at:
            self.calls["down" if n not in self.bad else "bad"] += 1
            raise ConnectionRefusedError(111, "Connection refused")
        self.calls["up"] += 1


def quiet_app(service: Dependency, **breaker: float) -> rdq.App:
    app = rdq.App()
    app.queue(
        "q",
        max_attempts=5,
        backoff=rdq.Backoff.exponential(base=1, cap=10),
        breaker=rdq.Breaker(**breaker),  # type: ignore[arg-type]
    )

    @app.handler("send", queue="q")
    async def send(payload: int) -> None:
        await service.call(payload)

    return app


async def submit_every(storage: Storage, app: rdq.App, spacing: float, until: float) -> int:
    """One task every ``spacing`` seconds from now until ``until`` (loop time)."""
    client, n = rdq.Client(storage, app), 0
    while asyncio.get_running_loop().time() < until:
        await client.submit("send", n)
        n += 1
        await asyncio.sleep(spacing)
    return n


@pytest.mark.parametrize("spacing", [30.0, 10.0], ids=["every-30s", "every-10s"])
async def test_a_quiet_queue_s_outage_costs_no_attempts(spacing: float) -> None:
    """One task every ``spacing`` seconds while the service is down for a minute, one
    worker: each task uses up its attempts before any window of outcomes could fill, so its
    own failures are the evidence. None is dead-lettered, each succeeds within a minute of the
    service coming back, and none is charged an attempt for the outage."""
    service = Dependency(down_from=0.0, up_at=60.0)
    app = quiet_app(service)
    async with virtual_store() as storage, worker(app, storage):
        sent = await submit_every(storage, app, spacing, until=60.0)
        done = await drained(storage)
        stats = await storage.stats("q")
        (control,) = await storage.list_controls("q")
        succeeded = await every_task(storage, Status.SUCCEEDED)
    assert stats.dlq_depth == 0
    assert len(succeeded) == sent == int(60 / spacing)
    assert done - service.up_at <= 60.0, f"last task done {done - service.up_at:.0f}s after"
    outages = flow.breaker_of(control).outages
    charged = Counter(retry.attempts_used(t, t.attempt_count, outages) for t in succeeded)
    assert charged == {1: sent}, f"attempts charged for the outage: {charged}"


async def test_a_task_failing_for_a_reason_of_its_own_is_dead_lettered_as_before() -> None:
    """Beside tasks that succeed on the same key, a task whose calls are always refused (a bad
    URL) is no evidence of an outage: it uses up its attempts and goes to the DLQ."""
    service = Dependency(down_from=0.0, up_at=0.0, bad=frozenset({0}))
    app = quiet_app(service)
    async with virtual_store() as storage, worker(app, storage):
        client = rdq.Client(storage, app)
        for n in range(200):  # five a second: the bad task's failures never dominate a window
            await client.submit("send", n)
            await asyncio.sleep(0.2)
        await drained(storage)
        stats = await storage.stats("q")
        (dead,) = await every_task(storage, Status.DEAD)
    assert stats.dlq_depth == 1 and stats.succeeded == 199
    assert [a.outcome for a in dead.attempts] == [Outcome.FAILED] * 5
    assert dead.attempts[-1].error_type == "ConnectionRefusedError"


async def test_a_quiet_queue_s_lone_failing_task_is_held_only_up_to_max_hold() -> None:
    """Alone in its queue, a task whose calls are always refused looks like an outage: it is
    held (its key's breaker open) — but only until its first failure is ``max_hold`` seconds
    old; then it goes to the DLQ saying why."""
    service = Dependency(down_from=0.0, up_at=0.0, bad=frozenset({0}))
    app = quiet_app(service, max_hold=600.0)
    async with virtual_store() as storage, worker(app, storage):
        sub = await rdq.Client(storage, app).submit("send", 0)
        await asyncio.sleep(300.0)
        held = await storage.get(sub.id)
        await drained(storage)
        dead = await storage.get(sub.id)
    assert held.status is Status.PENDING, "held while it may still be an outage"
    assert dead.status is Status.DEAD
    last = dead.attempts[-1]
    assert last.error_type == flow.OUTAGE_TOO_LONG and "max_hold of 600s" in (
        last.error_message or ""
    )
    first = dead.attempts[0].finished_at
    assert first is not None and last.finished_at is not None
    assert timedelta(seconds=600) < last.finished_at - first <= timedelta(seconds=660)
    assert service.calls["bad"] <= 40, service.calls


def shared_app(service: Dependency) -> rdq.App:
    app = rdq.App()
    app.queue("q", max_attempts=5, backoff=rdq.Backoff.exponential(base=1, cap=10), concurrency=10)
    for name in ("charge", "refund"):

        @app.handler(name, queue="q", dependency="psp")
        async def call(payload: int) -> None:
            await service.call(payload)

    healthy = Counter[float]()

    @app.handler("healthy", queue="q")
    async def ok(payload: int) -> None:
        await asyncio.sleep(0.01)
        healthy[int(asyncio.get_running_loop().time())] += 1

    app.healthy = healthy  # type: ignore[attr-defined]
    return app


async def produce(client: rdq.Client, until: float) -> None:
    """Steady traffic: 50 healthy and 10 dependency tasks a second, in tenths of a second."""
    n = 0
    while asyncio.get_running_loop().time() < until:
        batch = [rdq.Submission("healthy", n + i) for i in range(5)]
        batch.append(rdq.Submission("charge" if n % 2 else "refund", 10_000 + n))
        await client.submit_many(batch)
        n += 6
        await asyncio.sleep(0.1)


async def test_a_flood_behind_a_shared_dependency_trips_fast() -> None:
    """Steady traffic on a healthy dependency, then 1,000 of its tasks due the moment it
    fails for half a minute: on two workers, at most 60 calls reach it before the breaker holds
    them, none is dead-lettered, and the healthy handler beside it keeps its pace. (The flood's
    size does not change what reaches the service before the breaker trips: ``python -m
    bench.outage`` runs the same shape with 5,000 tasks and a minute's outage.)"""
    service = Dependency(down_from=20.0, up_at=50.0)
    app = shared_app(service)
    async with virtual_store() as storage:
        client = rdq.Client(storage, app)
        await client.submit_many(
            [rdq.Submission("charge" if n % 2 else "refund", n, delay=20.0) for n in range(1000)]
        )
        async with AsyncExitStack() as stack:
            for _ in range(2):
                await stack.enter_async_context(worker(app, storage))
            await produce(client, until=service.up_at)
            await drained(storage)
        stats = await storage.stats("q")
    assert stats.dlq_depth == 0
    assert service.calls["down"] <= 60, f"{service.calls['down']} calls reached the dead service"
    healthy = app.healthy  # type: ignore[attr-defined]
    before = sum(healthy[s] for s in range(10, 20)) / 10
    during = sum(healthy[s] for s in range(20, 50)) / 30
    assert during >= 0.9 * before, f"healthy: {during:.0f}/s during, {before:.0f}/s before"


async def test_a_service_failing_one_call_in_ten_with_503_never_trips_the_breaker() -> None:
    """httpx's own error for a 503, one call in ten, on a busy key: the breaker stays closed."""
    app = rdq.App()
    app.queue("q", max_attempts=5, backoff=rdq.Backoff.fixed(1.0))
    calls = Counter[str]()

    @app.handler("call", queue="q")
    async def call(payload: int) -> None:
        await asyncio.sleep(0.01)
        calls["all"] += 1
        if calls["all"] % 10 == 0:
            request = httpx.Request("POST", "http://svc.internal/")
            httpx.Response(503, request=request).raise_for_status()

    async with virtual_store() as storage:
        await rdq.Client(storage, app).submit_many([rdq.Submission("call", i) for i in range(3000)])
        async with worker(app, storage):
            await drained(storage)
        stats = await storage.stats("q")
        controls = await storage.list_controls("q")
    assert stats.succeeded == 3000 and stats.dlq_depth == 0
    assert not [c for c in controls if flow.breaker_of(c).trips or flow.breaker_of(c).outages]
