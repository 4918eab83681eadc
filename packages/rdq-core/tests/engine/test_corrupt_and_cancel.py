"""Tasks the worker must not run: one whose stored form does not decode is dead-lettered at
once as ``rdq.CorruptTask``; one an operator cancels while it runs is abandoned."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import asyncpg
import pytest

import rdq
from rdq.spi import DLQFilter, Outcome, Page, Status, Storage
from rdq_memory.testing import put_corrupt_task

from .conftest import Recorder, eventually, fast_worker, running, wait_status

pytestmark = pytest.mark.asyncio

# Stored values another program could write by hand (the schema's checks let them through):
# each fails to decode in one column.
BAD_COLUMNS = {
    "retry": """retry = '{"max_attempts": "lots"}'""",
    "headers": """headers = '{"trace": 1}'""",
    "attempts": """attempts = '[{"number": "one"}]'""",
}


async def corrupt_tasks(storage: Storage, backend: str, queue: str) -> list[str]:
    """Store due tasks of ``queue`` whose stored forms do not decode: through the memory
    store's test hook, or by raw SQL on PostgreSQL (one per bad column); their ids."""
    if backend == "memory":
        task_id = f"bad-{queue}"
        await put_corrupt_task(storage, queue, task_id)  # type: ignore[arg-type]
        return [task_id]
    ids = [f"bad-{column}-{queue}" for column in BAD_COLUMNS]
    for task_id in ids:
        await rdq.Client(storage).submit("job", None, queue=queue, id=task_id)
    schema = storage.config.schema  # type: ignore[attr-defined]
    conn = await asyncpg.connect(storage.config.dsn)  # type: ignore[attr-defined]
    try:
        for task_id, change in zip(ids, BAD_COLUMNS.values(), strict=True):
            await conn.execute(
                f'UPDATE "{schema}".task SET {change}, '
                "next_attempt_at = now() - interval '1 hour' WHERE id = $1",
                task_id,
            )
    finally:
        await conn.close()
    return ids


async def test_corrupt_tasks_are_dead_lettered_unrun_and_spare_their_batch(storage, backend, queue):
    app = rdq.App()
    app.queue(queue, concurrency=10, max_attempts=3)
    ran: list[str] = []

    @app.handler("job", queue=queue)
    async def job(payload: object, ctx: rdq.TaskContext) -> None:
        ran.append(ctx.task_id)

    bad_ids = await corrupt_tasks(storage, backend, queue)
    healthy = await rdq.Client(storage, app).submit_many(
        [rdq.Submission("job", i, queue=queue) for i in range(9)]
    )
    log = Recorder()
    async with running(fast_worker(app, storage, logger=log)):
        bad = [await wait_status(storage, task_id, Status.DEAD) for task_id in bad_ids]
        for sub in healthy:
            await wait_status(storage, sub.id, Status.SUCCEEDED)
    assert sorted(ran) == sorted(s.id for s in healthy)  # never the corrupt ones
    for task in bad:
        assert task.corrupt is not None
        if not task.attempts:  # its attempts column is what does not decode
            continue
        attempt = task.attempts[-1]
        assert (attempt.outcome, attempt.error_type) == (Outcome.PERMANENT, "rdq.CorruptTask")
        assert attempt.error_message is not None
        assert attempt.error_message.startswith("the stored task does not decode: ")
        assert task.corrupt in attempt.error_message
    by_type = DLQFilter(error_type="rdq.CorruptTask")
    listed, _ = await storage.dlq_list(queue, by_type, Page(limit=100))
    assert sorted(t.id for t in listed) == sorted(bad_ids)
    lines = log.events("dead-lettered")
    assert sorted(line["task_id"] for line in lines) == sorted(bad_ids)
    assert {line["error_type"] for line in lines} == {"rdq.CorruptTask"}


async def test_cancelling_a_running_async_task_abandons_its_handler(storage, queue):
    app = rdq.App()
    app.queue(queue, lease=0.6, timeout=60)
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @app.handler("long", queue=queue)
    async def long(payload: object) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    sub = await rdq.Client(storage, app).submit("long", queue=queue)
    log = Recorder()
    async with running(fast_worker(app, storage, logger=log)):
        await asyncio.wait_for(started.wait(), 30)
        assert await storage.cancel(queue, [sub.id]) == 1
        await asyncio.wait_for(cancelled.wait(), 30)  # at the next renewal
    task = await storage.get(sub.id)
    assert task.status == Status.CANCELLED
    assert task.attempts == []  # the abandoned handler's outcome is never written
    [line] = log.events("task cancelled by an operator; abandoning its handler")
    assert line["task_id"] == sub.id and line["queue"] == queue
    assert not log.events("lease lost")


async def test_cancelling_a_running_thread_task_fences_it_off(storage, queue):
    app = rdq.App()
    app.queue(queue, lease=0.6, timeout=60)
    started = threading.Event()
    release = threading.Event()
    finished: list[Any] = []

    @app.handler("long", queue=queue)
    def long(payload: object) -> None:
        started.set()
        release.wait(60)
        finished.append(True)

    sub = await rdq.Client(storage, app).submit("long", queue=queue)
    log = Recorder()
    worker = fast_worker(app, storage, logger=log)
    try:
        async with running(worker):
            await asyncio.to_thread(started.wait, 30)
            assert await storage.cancel(queue, [sub.id]) == 1
            # the next renewal (a third of the lease) is refused and the handler abandoned:
            # its slot is free although the thread still runs
            await eventually(lambda: _slot_freed(worker, log))
            assert not finished
    finally:
        release.set()
    task = await storage.get(sub.id)
    assert task.status == Status.CANCELLED and task.attempts == []
    assert log.events("task cancelled by an operator; abandoning its handler")


async def _slot_freed(worker: rdq.Worker, log: Recorder) -> bool:
    return bool(log.events("task cancelled by an operator")) and worker.in_flight == 0


async def test_a_revoked_running_task_gives_its_slot_to_a_waiting_one(storage, queue):
    # Five slots, all taken by long handlers, one task waiting: the revoke frees one slot,
    # fewer than a claim usually waits for, and the waiting task must still get it.
    app = rdq.App()
    app.queue(queue, lease=0.6, timeout=600, concurrency=5)
    started: dict[str, asyncio.Event] = {}

    @app.handler("long", queue=queue)
    async def long(payload: Any) -> None:
        started[payload].set()
        await asyncio.sleep(600)  # only a revoke ends it within the test

    client = rdq.Client(storage, app)
    names = [f"n{i}" for i in range(6)]
    for name in names:
        started[name] = asyncio.Event()
        await client.submit("long", name, queue=queue, id=f"{queue}-{name}")
    async with running(fast_worker(app, storage, grace_period=0.1)):

        async def five_started() -> bool:
            return sum(event.is_set() for event in started.values()) == 5

        await eventually(five_started)
        [waiting] = [name for name in names if not started[name].is_set()]
        revoked = next(name for name in names if started[name].is_set())
        assert await storage.cancel(queue, [f"{queue}-{revoked}"]) == 1
        await asyncio.wait_for(started[waiting].wait(), 30)  # the revoked one's slot
