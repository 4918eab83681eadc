"""A worker keeps nothing of a task once it is over: payloads of finished tasks are freed."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import uuid

import pytest

import rdq
from rdq.spi import Page, Status, TaskFilter
from rdq.worker._trim import MemoryTrim

from .conftest import eventually, fast_worker, running

TASKS = 20
SIZE = 500_000


@pytest.mark.asyncio
async def test_a_worker_frees_the_payloads_of_the_tasks_it_finished():
    """20 tasks of 0.5 MB run. Once they are over, the memory Python holds while the worker
    still runs (idle) is what it holds once the worker is gone, give or take 2 MB: the
    worker references no finished task's payload (10 MB). The store keeps its own copies
    either way, so that is the difference to look at."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    app = rdq.App()
    app.queue(queue, concurrency=TASKS)

    @app.handler("hold", queue=queue)
    async def hold(payload: dict[str, str]) -> int:
        return len(payload["blob"])

    async with rdq.open_storage(f"memory://mem-{queue}") as storage:
        client = rdq.Client(storage)
        await client.submit_many(
            [rdq.Submission("hold", {"blob": "x" * SIZE}, queue=queue)] * TASKS
        )
        tracemalloc.start()
        try:
            workers = [fast_worker(app, storage)]
            async with running(workers[0]):

                async def all_done() -> bool:
                    page, _ = await storage.list_tasks(
                        queue, TaskFilter(status=Status.SUCCEEDED), Page(limit=100)
                    )
                    return len(page) == TASKS and workers[0].in_flight == 0

                await eventually(all_done, "the tasks", 30)
                gc.collect()
                idle, peak = tracemalloc.get_traced_memory()
            workers.clear()
            gc.collect()
            gone, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak > TASKS * SIZE  # the payloads were decoded while they ran
    assert idle - gone < 2_000_000, (idle, gone)


@pytest.mark.asyncio
async def test_memory_is_trimmed_once_idle_after_work_at_most_every_interval():
    """glibc's malloc_trim (given here as a recorder) runs when the worker is idle after it
    claimed work, not while it was idle all along, and not twice within the interval."""
    calls: list[int] = []
    now = [100.0]
    trim = MemoryTrim(interval=10.0, mono=lambda: now[0], trim=calls.append)
    trim.idle()
    trim.worked()
    trim.idle()
    await asyncio.sleep(0.05)
    assert calls == [0]
    trim.worked()
    now[0] += 5.0
    trim.idle()
    await asyncio.sleep(0.05)
    assert calls == [0]
    now[0] += 5.0
    trim.idle()
    await asyncio.sleep(0.05)
    assert calls == [0, 0]
    trim.idle()
    await asyncio.sleep(0.05)
    assert calls == [0, 0]
