"""Tasks the worker must not run: one whose stored form does not decode is dead-lettered at
once as ``rdq.CorruptTask``; one an operator cancels while it runs is abandoned (the async
handlers on simulated time: at the lease's next renewal)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import asyncpg
import pytest

import rdq
from rdq.spi import DLQFilter, Outcome, Page, Status, Storage
from rdq.worker._heartbeat import MAX_TICK
from rdq_memory.testing import put_corrupt_task

from ._virtual import POLL, until, virtual_store, worker
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


@pytest.mark.looptime
async def test_cancelling_a_running_async_task_abandons_its_handler():
    """The worker learns of the cancel at the lease's next renewal (a third of the lease after
    the claim) and cancels the handler then."""
    app = rdq.App()
    app.queue("q", lease=30.0, timeout=600)
    started = asyncio.Event()
    times: dict[str, float] = {}
    loop = asyncio.get_running_loop()

    @app.handler("long", queue="q")
    async def long(payload: object) -> None:
        times["started"] = loop.time()
        started.set()
        try:
            await asyncio.sleep(600)
        except asyncio.CancelledError:
            times["cancelled"] = loop.time()
            raise

    log = Recorder()
    async with virtual_store() as storage:
        sub = await rdq.Client(storage, app).submit("long", queue="q")
        async with worker(app, storage, logger=log):
            await started.wait()
            assert await storage.cancel("q", [sub.id]) == 1
            await until(lambda: _true("cancelled" in times), 0.1)
        task = await storage.get(sub.id)
    assert task.status == Status.CANCELLED
    assert task.attempts == []  # the abandoned handler's outcome is never written
    [line] = log.events("task cancelled by an operator; abandoning its handler")
    assert line["task_id"] == sub.id and line["queue"] == "q"
    assert not log.events("lease lost")
    noticed = times["cancelled"] - times["started"]
    assert 10.0 <= noticed <= 10.0 + MAX_TICK, f"cancelled {noticed}s after it started"


async def _true(value: bool) -> bool:
    return value


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


@pytest.mark.looptime
async def test_a_revoked_running_task_gives_its_slot_to_a_waiting_one():
    # Five slots, all taken by long handlers, one task waiting: the revoke frees one slot,
    # fewer than a claim usually waits for, and the waiting task must still get it, as soon
    # as the worker learns of the revoke (at the next renewal of the lease).
    app = rdq.App()
    app.queue("q", lease=30.0, timeout=600, concurrency=5)
    started: dict[str, asyncio.Event] = {}
    loop = asyncio.get_running_loop()

    @app.handler("long", queue="q")
    async def long(payload: Any) -> None:
        started[payload].set()
        await asyncio.sleep(600)  # only a revoke ends it within the test

    names = [f"n{i}" for i in range(6)]
    async with virtual_store() as storage:
        client = rdq.Client(storage, app)
        for name in names:
            started[name] = asyncio.Event()
            await client.submit("long", name, queue="q", id=f"q-{name}")
        async with worker(app, storage, grace_period=0.1):

            async def five_started() -> bool:
                return sum(event.is_set() for event in started.values()) == 5

            await until(five_started, 0.01)
            [waiting] = [name for name in names if not started[name].is_set()]
            revoked = next(name for name in names if started[name].is_set())
            revoked_at = loop.time()
            assert await storage.cancel("q", [f"q-{revoked}"]) == 1
            await started[waiting].wait()  # the revoked one's slot
            took = loop.time() - revoked_at
    assert took <= 30.0 / 3 + MAX_TICK + POLL, f"the slot came back {took}s after the revoke"
