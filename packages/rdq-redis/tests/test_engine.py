"""The rdq engine (Client + Worker) end to end on Redis: handlers run, failures retry on the
storage's schedule, permanent failures land in the DLQ, and an idle worker (waiting in
``wait_due``) picks up a task submitted later."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis

import rdq
from rdq import open_storage
from rdq.spi import Status, Storage

PATIENCE = 60.0


async def _until(predicate: Any, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PATIENCE
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError(f"gave up after {PATIENCE:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.mark.asyncio
async def test_a_worker_runs_retries_and_dead_letters_tasks_on_redis(storage_url: str) -> None:
    queue = f"engine-{uuid.uuid4().hex[:8]}"
    app = rdq.App()
    app.queue(queue, max_attempts=3, backoff=rdq.Backoff.fixed(0.05), lease=30.0, timeout=10.0)
    flaky_calls: dict[str, int] = {}

    @app.handler("ok", queue=queue)
    async def ok(payload: Any) -> None:
        return None

    @app.handler("flaky", queue=queue)
    async def flaky(payload: Any, ctx: rdq.TaskContext) -> None:
        flaky_calls[ctx.task_id] = flaky_calls.get(ctx.task_id, 0) + 1
        if ctx.attempt < 2:
            raise RuntimeError("first attempt fails")

    @app.handler("broken", queue=queue)
    async def broken(payload: Any) -> None:
        raise rdq.Permanent("never works")

    async with open_storage(storage_url) as storage:
        await storage.migrate()
        client = rdq.Client(storage, app=app)
        ok_ids = [(await client.submit("ok", {"n": n})).id for n in range(20)]
        flaky_id = (await client.submit("flaky", {})).id
        broken_id = (await client.submit("broken", {})).id

        async with open_storage(storage_url) as worker_storage:
            worker = rdq.Worker(app, worker_storage, queues=[queue], maintenance=False)
            running = asyncio.create_task(worker.run())
            try:

                async def settled() -> bool:
                    stats = await storage.stats(queue)
                    return stats.succeeded == 21 and stats.dlq_depth == 1

                await _until(settled, "every task to succeed or dead-letter")
                # The worker is idle now (in wait_due); a new task must still be picked up.
                late = (await client.submit("ok", {"late": True})).id

                async def late_done() -> bool:
                    return (await storage.get(late)).status is Status.SUCCEEDED

                await _until(late_done, "the late task to run")
            finally:
                worker.stop()
                await asyncio.wait_for(running, PATIENCE)

        for task_id in ok_ids:
            assert (await storage.get(task_id)).status is Status.SUCCEEDED
        flaky_task = await storage.get(flaky_id)
        assert flaky_task.status is Status.SUCCEEDED
        assert [a.outcome for a in flaky_task.attempts] == ["FAILED", "SUCCEEDED"]
        assert flaky_calls[flaky_id] == 2
        broken_task = await storage.get(broken_id)
        assert broken_task.status is Status.DEAD
        assert broken_task.attempts[-1].outcome == "PERMANENT"
        await _assert_clean(storage, queue)


async def _assert_clean(storage: Storage, queue: str) -> None:
    stats = await storage.stats(queue)
    assert (stats.pending, stats.in_flight) == (0, 0)


@pytest.mark.asyncio
async def test_a_poison_task_is_dead_lettered_and_its_20_neighbours_all_run(
    storage_url: str, redis_url: str, key_prefix: str
) -> None:
    """A task whose stored body does not decode (``HSET <prefix>:{q}:task:a body '{not
    json'``) beside 20 intact ones, a worker claiming 10 at a time: the poison task goes to
    the DLQ as ``rdq.CorruptTask`` at its first claim, and every neighbour succeeds at its
    first attempt. The lease is long, so no lease lapses in a correct run however slow the
    machine; were the poison task to strand its batch, the neighbours would stay claimed
    and never settle."""
    queue = f"poison-{uuid.uuid4().hex[:8]}"
    app = rdq.App()
    app.queue(queue, max_attempts=3, lease=600.0, timeout=60.0, concurrency=10)

    @app.handler("ok", queue=queue)
    async def ok(payload: Any) -> None:
        return None

    async with open_storage(storage_url) as storage:
        await storage.migrate()
        client = rdq.Client(storage, app=app)
        poison = (await client.submit("ok", {"n": "a"}, id=f"{queue}-a")).id
        intact = [(await client.submit("ok", {"n": n})).id for n in range(20)]
        raw = aioredis.Redis.from_url(redis_url)
        try:
            await raw.hset(f"{key_prefix}:{{{queue}}}:task:{poison}", "body", "{not json")
        finally:
            await raw.aclose()

        async with open_storage(storage_url) as worker_storage:
            worker = rdq.Worker(app, worker_storage, queues=[queue], maintenance=False)
            running = asyncio.create_task(worker.run())
            try:

                async def settled() -> bool:
                    stats = await storage.stats(queue)
                    return stats.succeeded == 20 and stats.dlq_depth == 1

                await _until(settled, "the neighbours to succeed and the poison task to die")
            finally:
                worker.stop()
                await asyncio.wait_for(running, PATIENCE)

        dead = await storage.get(poison)
        assert dead.status is Status.DEAD and dead.corrupt is not None
        assert [a.error_type for a in dead.attempts] == ["rdq.CorruptTask"]
        for task_id in intact:
            task = await storage.get(task_id)
            assert (task.status, [a.outcome for a in task.attempts]) == (
                Status.SUCCEEDED,
                ["SUCCEEDED"],
            )
        await _assert_clean(storage, queue)
