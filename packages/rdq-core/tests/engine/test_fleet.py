"""Workers in the fleet's view: registered before their first claim, heartbeating what they
hold, gone from the registry when they stop (left there, silent, when they die), and the
attempts they end counted per queue and minute."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import rdq
from rdq.spi import Counts
from rdq.worker._fleet import HEARTBEAT
from rdq_compliance.testing import FaultyStorage

from ._virtual import START, until, virtual_store, worker

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def test_a_worker_registers_heartbeats_what_it_holds_and_leaves_when_it_stops() -> None:
    app = rdq.App()
    app.queue("q", concurrency=4, lease=60.0, timeout=600.0)
    release = asyncio.Event()

    @app.handler("job", queue="q")
    async def job(payload: object) -> None:
        await release.wait()

    async with virtual_store() as storage:
        await rdq.Client(storage, app).submit_many([rdq.Submission("job", i) for i in range(3)])
        async with worker(app, storage) as w:

            async def registered() -> bool:
                return bool(await storage.list_workers())

            await until(registered, 0.01)
            (me,) = await storage.list_workers()
            assert (me.id, me.queues, me.concurrency, me.state) == (
                w.worker_id,
                ["q"],
                4,
                "running",
            )
            first_seen = me.seen_at

            async def holds_three() -> bool:
                (info,) = await storage.list_workers()
                return info.held == 3

            await until(holds_three)
            await asyncio.sleep(HEARTBEAT + 0.1)
            (later,) = await storage.list_workers()
            assert later.seen_at is not None and first_seen is not None
            assert later.seen_at > first_seen and later.started_at == me.started_at
            release.set()
        assert await storage.list_workers() == [], "a worker that stopped leaves the registry"


async def test_a_worker_that_dies_stays_registered_and_goes_silent() -> None:
    app = rdq.App()
    app.queue("q")
    async with virtual_store() as memory:
        # a process killed with -9 never says goodbye: here its goodbye never arrives
        storage = FaultyStorage(memory, {"remove_worker": (1, rdq.StorageUnavailable("gone"))})
        w = rdq.Worker(
            app, storage, clock=asyncio.get_running_loop().time, maintenance=False, grace_period=1
        )
        run = asyncio.create_task(w.run())
        await asyncio.sleep(2 * HEARTBEAT)
        w.stop()
        await run
        storage = memory
        (dead,) = await storage.list_workers()
        await asyncio.sleep(60)
        assert dead.seen_at is not None
        silent_for = (await storage.now()) - dead.seen_at
        assert silent_for >= timedelta(seconds=60), "nothing heartbeats for it any more"
        assert [x.id for x in await storage.list_workers()] == [w.worker_id]


async def test_attempts_are_counted_per_queue_and_minute() -> None:
    app = rdq.App()
    app.queue("q", max_attempts=2, backoff=rdq.Backoff.fixed(1.0))

    @app.handler("ok", queue="q")
    async def ok(payload: object) -> None:
        return None

    @app.handler("bad", queue="q")
    async def bad(payload: object) -> None:
        raise RuntimeError("nope")

    async with virtual_store() as storage:
        client = rdq.Client(storage, app)
        await client.submit_many([rdq.Submission("ok", i) for i in range(7)])
        await client.submit_many([rdq.Submission("bad", i) for i in range(3)])
        async with worker(app, storage):

            async def drained() -> bool:
                stats = await storage.stats("q")
                return stats.pending == stats.in_flight == 0

            await until(drained)
        counts = await storage.read_counts("q", START - timedelta(minutes=1))
    total = Counts(
        queue="q",
        minute=START,
        succeeded=sum(c.succeeded for c in counts),
        failed=sum(c.failed for c in counts),
        dead=sum(c.dead for c in counts),
    )
    assert (total.succeeded, total.failed, total.dead) == (7, 3, 3)
    assert all(c.minute.second == 0 and c.minute.microsecond == 0 for c in counts)
