"""A handler that blocks the event loop: the watchdog sees and reports it, and the leases of the
tasks beside it are kept, so no healthy neighbour loses its lease or an attempt."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY

import rdq
from rdq.spi import Outcome, Status, Storage
from rdq_memory import MemoryStorage

from .conftest import Recorder, fast_worker, running, wait_status

pytestmark = pytest.mark.asyncio


@contextmanager
def worker_thread(
    app: rdq.App, url: str, after: threading.Event | None = None, **kwargs: Any
) -> Iterator[None]:
    """A second worker on its own thread and event loop, with a store of its own (another
    process, as far as the first worker can tell); it starts once ``after`` is set."""
    started = threading.Event()
    holder: list[rdq.Worker] = []

    async def serve() -> None:
        if after is not None:
            await asyncio.to_thread(after.wait, 60)
        async with rdq.open_storage(url) as store:
            worker = fast_worker(app, store, **kwargs)
            holder.append(worker)
            started.set()
            await worker.run()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    if after is None:
        started.wait(30)
    try:
        yield
    finally:
        if after is not None:
            after.set()
        started.wait(30)
        holder[0].stop()
        thread.join(60)


def stall_app(queue: str) -> rdq.App:
    app = rdq.App()
    app.queue(queue, timeout=1.0, lease=3.0, concurrency=10, max_attempts=3)

    @app.handler("healthy", queue=queue)
    async def healthy(payload: int) -> None:
        await asyncio.sleep(0.3)

    @app.handler("blocker", queue=queue)
    async def blocker(payload: int) -> None:
        time.sleep(4)  # noqa: ASYNC251 - blocks the whole loop: four seconds, longer than the lease

    return app


@asynccontextmanager
async def two_workers(
    app: rdq.App, storage: Storage, url: str, log: Recorder
) -> AsyncIterator[None]:
    async with running(fast_worker(app, storage, logger=log)):
        with worker_thread(app, url, logger=log):
            yield


async def test_a_handler_blocking_the_loop_costs_its_neighbours_nothing(
    storage, storage_url, queue
):
    """The scenario of a blocked loop: 3 handlers sleep 4 s in ``async def`` (timeout 1 s,
    lease 3 s) among 30 healthy tasks, two workers. Every healthy task succeeds at its first
    attempt: no lease lapsed, nothing was charged an attempt; the stalls were reported."""
    app = stall_app(queue)
    client = rdq.Client(storage, app)
    submissions = []
    for i in range(33):
        handler = "blocker" if i % 11 == 5 else "healthy"
        submissions.append(rdq.Submission(handler, i, queue=queue, id=f"{handler}-{i}"))
    subs = await client.submit_many(submissions)
    log = Recorder()
    stalls_before = REGISTRY.get_sample_value("rdq_loop_stalls_total", {"queue": queue}) or 0.0
    async with two_workers(app, storage, storage_url, log):
        done = [await wait_status(storage, s.id, Status.SUCCEEDED, timeout=90) for s in subs]
    healthy = [t for t in done if t.handler_ref == "healthy"]
    assert len(healthy) == 30
    for task in healthy:
        assert [a.outcome for a in task.attempts] == [Outcome.SUCCEEDED], task.attempts
    for task in done:
        if task.handler_ref == "blocker":  # its lease was kept too: it ran once, to the end
            assert [a.outcome for a in task.attempts] == [Outcome.SUCCEEDED], task.attempts
    stalls = log.events("event loop stalled by a handler")
    assert stalls, log.lines
    assert {s["handler"] for s in stalls} == {"blocker"}
    assert all(s["queue"] == queue and s["task_id"].startswith("blocker-") for s in stalls)
    assert all("time.sleep(4)" in s["stack"] for s in stalls), stalls[0]["stack"]
    assert log.events("event loop running again after a stall")
    stalls_after = REGISTRY.get_sample_value("rdq_loop_stalls_total", {"queue": queue})
    assert stalls_after is not None and stalls_after - stalls_before == len(stalls)


async def test_a_loop_stalled_past_the_stall_limit_lets_its_leases_lapse(
    storage, storage_url, queue
):
    """A worker whose loop stays stalled past ``stall_limit`` counts as hung: its leases are
    no longer renewed, so another worker takes its task over after the lease."""
    app = rdq.App()
    app.queue(queue, lease=1.0, timeout=30.0, max_attempts=3)

    hanging = threading.Event()
    rescued = threading.Event()

    @app.handler("hang", queue=queue)
    async def hang(payload: object, ctx: rdq.TaskContext) -> None:
        if ctx.attempt == 1:
            hanging.set()
            # hung, as far as anyone can tell: the loop stays blocked until another worker has
            # taken the task over (or for a minute, when its lease is wrongly kept alive)
            rescued.wait(60)
        else:
            rescued.set()

    sub = await rdq.Client(storage, app).submit("hang", queue=queue)
    log = Recorder()
    hung = fast_worker(app, storage, logger=log, stall_threshold=0.2, stall_limit=1.0)
    # the rescuer starts once the first worker hangs, so it cannot take the task first
    with worker_thread(app, storage_url, after=hanging, logger=log):
        async with running(hung):
            task = await wait_status(storage, sub.id, Status.SUCCEEDED, timeout=60)
    assert [a.outcome for a in task.attempts] == [Outcome.LEASE_EXPIRED, Outcome.SUCCEEDED]
    assert task.attempts[1].worker_id != hung.worker_id
    assert log.events("event loop stalled past the stall limit")


class _ReopensElsewhere(MemoryStorage):
    """A store whose ``reopen`` gives a store that does not reach its tasks (a bug of its
    author's, or a URL that names no shared resource)."""

    def reopen(self) -> MemoryStorage:
        return MemoryStorage()


async def test_a_store_a_second_connection_cannot_reach_renews_leases_on_the_loop():
    """The lease thread's own store would not see the worker's tasks: the worker notices it
    and its loop keeps renewing the leases."""
    app = rdq.App()
    app.queue("solo", lease=1.0, timeout=30.0, max_attempts=1)

    @app.handler("long", queue="solo")
    async def long(payload: object) -> None:
        await asyncio.sleep(3.0)  # three leases long

    log = Recorder()
    async with _ReopensElsewhere() as storage:
        sub = await rdq.Client(storage, app).submit("long")
        async with running(fast_worker(app, storage, logger=log)):
            task = await wait_status(storage, sub.id, Status.SUCCEEDED)
    assert [a.outcome for a in task.attempts] == [Outcome.SUCCEEDED]
    assert log.events("the reopened store does not reach the worker's tasks")


class SlowLeaseThreadStore(MemoryStorage):
    """A store whose second store, the worker's lease thread's, takes 2 s to connect (a
    server far away, or a machine busy when the worker starts)."""

    def reopen(self) -> MemoryStorage:
        second = super().reopen()
        connect = second.connect

        async def slow_connect() -> None:
            await asyncio.sleep(2.0)
            await connect()

        second.connect = slow_connect  # type: ignore[method-assign]
        return second


async def test_a_handler_blocking_the_loop_from_the_first_claim_keeps_its_lease() -> None:
    """The worker's first claim waits for its lease thread's store: a handler that blocks the
    loop (2.5 s) from the moment its task is claimed outlasts its lease (1.5 s), and only the
    lease thread can renew it. Had the worker claimed before that store was open (2 s), the
    lease would have lapsed and a rival's claim taken the task."""
    app = rdq.App()
    app.queue("q", lease=1.5, timeout=10.0, max_attempts=3)

    @app.handler("block", queue="q")
    async def block(payload: object) -> None:
        time.sleep(2.5)  # noqa: ASYNC251 - blocks the worker's loop, longer than the lease

    base = SlowLeaseThreadStore()
    mine = MemoryStorage.reopen(base)  # the test's own store on the same tasks, no delay
    await mine.connect()
    holder: list[rdq.Worker] = []

    async def serve() -> None:
        await base.connect()
        try:
            holder.append(fast_worker(app, base))
            await holder[0].run()
        finally:
            await base.aclose()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    try:
        await rdq.Client(mine, app).submit("block", queue="q", id="blocker")
        thread.start()
        await wait_status(mine, "blocker", Status.IN_FLIGHT, timeout=10)
        await asyncio.sleep(1.8)  # past the lease, were it not renewed
        assert await mine.claim_due("q", 1, timedelta(seconds=30)) == [], "the lease lapsed"
        task = await wait_status(mine, "blocker", Status.SUCCEEDED, timeout=20)
        assert [a.outcome for a in task.attempts] == [Outcome.SUCCEEDED]
    finally:
        if holder:
            holder[0].stop()
        thread.join(30)
        await mine.aclose()
