"""Backoff, leases, heartbeats and timeouts, measured exactly: the worker runs on an event loop
whose time is simulated (looptime: time jumps to the next timer whenever the loop would
wait) and on a memory store whose clock follows that loop (``clock=loop.time`` for the
worker). A minute of backoff takes a few milliseconds, and every figure below is the one the
policy computes, to the poll granularity, with no slack for a loaded machine."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rdq
from rdq.retry import TIMEOUT_ERROR, backoff_bounds
from rdq.spi import Outcome, Status
from rdq_compliance.testing import FaultyStorage
from rdq_memory import MemoryStorage

from ._virtual import POLL, gaps, settle, virtual_store, worker

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


def failing(times: int, exc: Callable[[int], Exception]) -> Callable[..., object]:
    async def handler(payload: object, ctx: rdq.TaskContext) -> None:
        if ctx.attempt <= times:
            raise exc(ctx.attempt)

    return handler


async def test_a_fixed_backoff_waits_exactly_its_delay_by_the_storage_clock() -> None:
    app = rdq.App()
    app.queue("q", max_attempts=3, backoff=rdq.Backoff.fixed(40.0))
    app.register("fails", failing(99, lambda n: RuntimeError(f"attempt {n}")), queue="q")
    async with virtual_store() as storage:
        sub = await rdq.Client(storage, app).submit("fails")
        async with worker(app, storage):
            task = await settle(storage, sub.id, Status.DEAD)
    assert [a.outcome for a in task.attempts] == [Outcome.FAILED] * 3
    assert all(40.0 <= gap <= 40.0 + POLL for gap in gaps(task)), gaps(task)


async def test_exponential_backoff_with_full_jitter_stays_within_its_bounds() -> None:
    backoff = rdq.Backoff.exponential(base=2.0, cap=30.0)
    app = rdq.App()
    app.queue("q", max_attempts=7, backoff=backoff)
    app.register("flaky", failing(6, lambda n: ConnectionError(f"refused {n}")), queue="q")
    async with virtual_store() as storage:
        sub = await rdq.Client(storage, app).submit("flaky")
        async with worker(app, storage, rng=random.Random(7)):
            task = await settle(storage, sub.id, Status.SUCCEEDED)
    assert [a.number for a in task.attempts] == [1, 2, 3, 4, 5, 6, 7]
    measured = gaps(task)
    for n, gap in enumerate(measured, start=1):
        low, high = backoff_bounds(backoff, n)
        assert low <= gap <= high + POLL, (n, gap, (low, high))
    assert len(set(measured)) == len(measured), "full jitter: the waits differ"


async def test_retry_after_waits_the_delay_the_handler_asked_for() -> None:
    app = rdq.App()
    app.queue("q", max_attempts=5, backoff=rdq.Backoff.fixed(1.0))
    app.register("limited", failing(1, lambda n: rdq.RetryAfter(90, "rate limited")), queue="q")
    async with virtual_store() as storage:
        sub = await rdq.Client(storage, app).submit("limited")
        async with worker(app, storage):
            task = await settle(storage, sub.id, Status.SUCCEEDED)
    asked, ran = task.attempts
    assert (asked.outcome, asked.error_type) == (Outcome.FAILED, "rdq.RetryAfter")
    assert asked.error_message == "rate limited" and ran.outcome == Outcome.SUCCEEDED
    (gap,) = gaps(task)
    assert 90.0 <= gap <= 90.0 + POLL


async def test_a_retry_due_a_fraction_of_a_clock_tick_ahead_does_not_spin_the_claim_loop() -> None:
    """The worker notes a retry of its own due in less time than the loop's clock can tick
    (what is left of a delay computed on the store's clock) while a claim is out, and the
    claim comes back empty: the claim loop counts the retry as due and waits for the store,
    instead of claiming again and again at one instant."""
    app = rdq.App()
    app.queue("q")
    app.register("fails", failing(99, lambda n: RuntimeError(f"attempt {n}")), queue="q")
    loop = asyncio.get_running_loop()
    claims_at: Counter[float] = Counter()
    workers: list[rdq.Worker] = []

    async def around(name: str, call: Callable[[], Awaitable[Any]]) -> Any:
        result = await call()
        if name == "claim_due":
            claims_at[loop.time()] += 1
            if claims_at[loop.time()] > 1000:
                await asyncio.sleep(1.0)  # a spinning loop: let the test end
            if len(claims_at) == 3 and not result:
                workers[0]._note_retry("q", 1e-10)
        return result

    memory = virtual_store()
    async with memory, worker(app, FaultyStorage(memory, around=around)) as w:
        workers.append(w)
        await asyncio.sleep(10.0)
    assert len(claims_at) > 3, "the worker went on claiming"
    assert max(claims_at.values()) <= 2, claims_at.most_common(1)


async def test_a_lease_lost_by_a_dead_worker_is_reclaimed_when_it_expires_and_recorded() -> None:
    app = rdq.App()
    app.queue("q", lease=30.0, max_attempts=3)
    app.register("job", failing(0, RuntimeError), queue="q")
    async with virtual_store() as storage:
        sub = await rdq.Client(storage, app).submit("job")
        (held,) = await storage.claim_due(
            "q", 1, timedelta(seconds=30), worker_id="host:1:dead"
        )  # a worker that claimed, then died
        async with worker(app, storage) as live:
            task = await settle(storage, sub.id, Status.SUCCEEDED)
    lapsed, ran = task.attempts
    assert lapsed.outcome == Outcome.LEASE_EXPIRED and lapsed.worker_id == "host:1:dead"
    assert held.task.lease_expires_at is not None and lapsed.finished_at is not None
    waited = (lapsed.finished_at - held.task.lease_expires_at).total_seconds()
    assert 0.0 <= waited <= POLL, "reclaimed as soon as the lease expired"
    assert ran.outcome == Outcome.SUCCEEDED and ran.worker_id == live.worker_id


async def test_heartbeats_keep_the_lease_of_a_handler_that_runs_ten_leases_long() -> None:
    """A second worker claims all along: it never finds the lease lapsed."""
    app = rdq.App()
    app.queue("q", lease=10.0, timeout=600.0, max_attempts=1)

    @app.handler("long", queue="q")
    async def long(payload: object) -> None:
        await asyncio.sleep(100.0)

    async with virtual_store() as storage:
        sub = await rdq.Client(storage, app).submit("long")
        async with worker(app, storage), worker(app, storage):
            task = await settle(storage, sub.id, Status.SUCCEEDED)
    (attempt,) = task.attempts  # no LEASE_EXPIRED: never reclaimed while it ran
    assert attempt.outcome == Outcome.SUCCEEDED
    assert attempt.started_at is not None and attempt.finished_at is not None
    assert 100.0 <= (attempt.finished_at - attempt.started_at).total_seconds() <= 100.0 + POLL


async def test_a_handler_past_its_timeout_is_recorded_as_timeout_when_the_timeout_runs_out() -> (
    None
):
    app = rdq.App()
    app.queue("q", timeout=5.0, lease=60.0, max_attempts=1)

    @app.handler("slow", queue="q")
    async def slow(payload: object) -> None:
        await asyncio.sleep(3600.0)

    async with virtual_store() as storage:
        sub = await rdq.Client(storage, app).submit("slow")
        async with worker(app, storage):
            task = await settle(storage, sub.id, Status.DEAD)
    (attempt,) = task.attempts
    assert attempt.outcome == Outcome.TIMEOUT and attempt.error_type == TIMEOUT_ERROR
    assert attempt.started_at is not None and attempt.finished_at is not None
    assert 5.0 <= (attempt.finished_at - attempt.started_at).total_seconds() <= 5.0 + POLL


@pytest.mark.parametrize(
    "offset", [timedelta(hours=1), timedelta(hours=-1)], ids=["ahead", "behind"]
)
async def test_retries_follow_the_storage_clock_an_hour_away_from_the_local_one(
    offset: timedelta,
) -> None:
    """The store's clock is an hour from the worker's wall clock: retries still keep their
    backoff (not due at once, not an hour late), and every recorded time is the store's."""
    app = rdq.App()
    app.queue("skew", max_attempts=5, backoff=rdq.Backoff.fixed(4.0))
    app.register("flaky", failing(2, lambda n: RuntimeError("not yet")), queue="skew")
    loop = asyncio.get_running_loop()
    wall = datetime.now(UTC) - timedelta(seconds=loop.time())
    async with MemoryStorage(
        clock=lambda: wall + offset + timedelta(seconds=loop.time())
    ) as storage:
        sub = await rdq.Client(storage, app).submit("flaky")
        async with worker(app, storage):
            task = await settle(storage, sub.id, Status.SUCCEEDED)
    assert [a.outcome for a in task.attempts] == [Outcome.FAILED, Outcome.FAILED, Outcome.SUCCEEDED]
    assert all(4.0 <= gap <= 4.0 + POLL for gap in gaps(task)), gaps(task)
    started = task.attempts[0].started_at
    assert started is not None and abs(started - (datetime.now(UTC) + offset)) < timedelta(
        minutes=5
    )
