"""Over many behaviour sequences, a task ends exactly where rdq.retry says (memory store)."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

import rdq
from rdq.spi import Outcome, Status
from rdq_memory import MemoryStorage

from .conftest import fast_worker, running

BEHAVIOURS = st.lists(st.sampled_from(["ok", "fail", "perm", "retry_after", "timeout"]), max_size=6)


def expected(behaviours: list[str], max_attempts: int) -> tuple[Status, list[Outcome]]:
    outcomes: list[Outcome] = []
    for n in range(1, max_attempts + 1):
        b = behaviours[n - 1] if n - 1 < len(behaviours) else "ok"
        if b == "ok":
            return Status.SUCCEEDED, [*outcomes, Outcome.SUCCEEDED]
        if b == "perm":
            return Status.DEAD, [*outcomes, Outcome.PERMANENT]
        outcomes.append(Outcome.TIMEOUT if b == "timeout" else Outcome.FAILED)
    return Status.DEAD, outcomes


async def run_one(behaviours: list[str], max_attempts: int) -> tuple[Status, list[Outcome]]:
    app = rdq.App()
    app.queue(  # the retry rules alone: a quiet queue's outage holds tasks (test_breaker.py)
        "prop", max_attempts=max_attempts, backoff=rdq.Backoff.fixed(0), timeout=0.05, breaker=False
    )

    @app.handler("scripted", queue="prop")
    async def scripted(payload: list[str], ctx: rdq.TaskContext) -> None:
        b = payload[ctx.attempt - 1] if ctx.attempt - 1 < len(payload) else "ok"
        if b == "fail":
            raise OSError("transient")
        if b == "perm":
            raise rdq.Permanent("never")
        if b == "retry_after":
            raise rdq.RetryAfter(0)
        if b == "timeout":
            await asyncio.sleep(5)

    async with MemoryStorage() as storage:
        sub = await rdq.Client(storage, app).submit("scripted", behaviours)
        async with running(fast_worker(app, storage, poll_max=0.05)):
            task = await _settled(storage, sub.id)
    return task.status, [a.outcome for a in task.attempts]


async def _settled(storage: MemoryStorage, task_id: str) -> rdq.spi.Envelope:
    for _ in range(2000):
        task = await storage.get(task_id)
        if task.status in (Status.SUCCEEDED, Status.DEAD):
            return task
        await asyncio.sleep(0.01)
    raise AssertionError("task did not settle")


@settings(max_examples=25, deadline=None)
@given(behaviours=BEHAVIOURS, max_attempts=st.integers(1, 4))
def test_final_state_follows_the_classification_rules(behaviours, max_attempts):
    got = asyncio.run(run_one(behaviours, max_attempts))
    assert got == expected(behaviours, max_attempts)
