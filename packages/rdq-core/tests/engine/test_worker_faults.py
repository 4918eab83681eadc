"""Faults: a skewed local clock, storage outages, stale claims, shutdown and signals. The
tests whose fault is waited out (an outage's pace, a lease, a grace period) run on simulated
time on the memory store (``_virtual.py``), with the figure checked exactly; those with a
thread, a signal or a real server's clock stay on real time."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

import rdq
from rdq import metrics
from rdq.spi import Outcome, Status, Storage
from rdq.worker._claiming import OUTAGE_RETRY_CAP, OUTAGE_RETRY_FIRST
from rdq.worker._heartbeat import MAX_TICK
from rdq_compliance.testing import FaultyStorage
from rdq_memory import MemoryStorage

from ._virtual import POLL, START, settle, virtual_store, worker
from .conftest import Recorder, eventually, fast_worker, running, wait_status

pytestmark = pytest.mark.asyncio


@pytest.mark.looptime
@pytest.mark.parametrize(
    ("batched", "resolve"),
    [(False, "complete"), (True, "complete_many")],
    ids=["single", "batched"],
)
async def test_worker_survives_a_storage_outage(batched, resolve):
    """Four claims and two outcome writes refused: the worker claims again at the outage
    pace (doubling from ``OUTAGE_RETRY_FIRST`` to ``OUTAGE_RETRY_CAP``, each wait drawn
    within ±50 %) and writes the outcome once the store takes it."""
    app = rdq.App()
    app.queue("q")

    @app.handler("job", queue="q")
    async def job(payload: object) -> None:
        return None

    loop = asyncio.get_running_loop()
    outage = rdq.StorageUnavailable("connection refused (127.0.0.1:5432)")
    claims: list[float] = []

    async def around(name: str, call: Any) -> Any:
        if name == "claim_due":
            claims.append(loop.time())
            if len(claims) <= 4:
                raise outage
        return await call()

    async with virtual_store() as memory:
        sub = await rdq.Client(memory, app).submit("job")
        flaky = FaultyStorage(
            memory, {resolve: (2, outage)}, capabilities={"batch_complete": batched}, around=around
        )
        async with worker(app, flaky):
            task = await settle(memory, sub.id, Status.SUCCEEDED)
    assert flaky.calls[resolve] == 3
    assert [a.outcome for a in task.attempts] == [Outcome.SUCCEEDED]
    waits = [later - earlier for earlier, later in itertools.pairwise(claims[:5])]
    paces = [min(OUTAGE_RETRY_FIRST * 2**n, OUTAGE_RETRY_CAP) for n in range(4)]
    assert len(waits) == 4 and all(
        pace / 2 <= wait <= pace * 1.5 for wait, pace in zip(waits, paces, strict=True)
    ), (waits, paces)


async def test_stale_claim_is_counted_and_does_not_crash_the_worker(storage, queue):
    app = rdq.App()
    app.queue(queue)

    @app.handler("job", queue=queue)
    async def job(payload: object) -> None:
        return None

    client = rdq.Client(storage, app)
    first = await client.submit("job")
    before = metrics.STALE_CLAIMS.labels(queue)._value.get()
    flaky = FaultyStorage(
        storage, {"complete": (1, rdq.StaleClaim(first.id))}, capabilities={"batch_complete": False}
    )
    async with running(fast_worker(app, flaky)):  # type: ignore[arg-type]
        await eventually(lambda: _called(flaky, "complete"))  # the refused outcome
        second = await client.submit("job")
        await wait_status(storage, second.id, Status.SUCCEEDED)
    assert metrics.STALE_CLAIMS.labels(queue)._value.get() == before + 1
    # the first outcome was refused: the task stays claimed until its lease expires
    assert (await storage.get(first.id)).status == Status.IN_FLIGHT


@pytest.mark.looptime
async def test_shutdown_interrupts_what_outlives_the_grace_period():
    """A handler still running when the grace period after a stop has passed is interrupted
    then, and the interruption uses up no attempt."""
    app = rdq.App()
    app.queue("q", max_attempts=1, timeout=60)
    started = asyncio.Event()

    @app.handler("slow", queue="q")
    async def slow(payload: object) -> None:
        started.set()
        await asyncio.sleep(60)

    @app.handler("short", queue="q")
    async def short(payload: object) -> None:
        started.set()
        await asyncio.sleep(0.3)

    loop = asyncio.get_running_loop()
    async with virtual_store() as storage:
        client = rdq.Client(storage, app)
        slow_task = await client.submit("slow")
        async with worker(app, storage, grace_period=0.5):
            await started.wait()
            stopped_at = START + timedelta(seconds=loop.time())
        task = await storage.get(slow_task.id)
        assert task.status == Status.PENDING
        (interrupted,) = task.attempts
        assert (interrupted.outcome, interrupted.error_type) == (
            Outcome.INTERRUPTED,
            "rdq.Interrupted",
        )
        assert interrupted.finished_at is not None
        grace = (interrupted.finished_at - stopped_at).total_seconds()
        assert 0.5 <= grace <= 0.5 + POLL, f"interrupted {grace}s after the stop"
        # an interruption does not use up the only attempt: the next worker runs it
        app2 = rdq.App()
        app2.queue("q", max_attempts=1)
        app2.register("slow", short, queue="q")
        async with worker(app2, storage):
            done = await settle(storage, slow_task.id, Status.SUCCEEDED)
    assert [a.outcome for a in done.attempts] == [Outcome.INTERRUPTED, Outcome.SUCCEEDED]


async def test_shutdown_lets_in_flight_work_finish_within_grace(storage, queue):
    app = rdq.App()
    app.queue(queue)
    started = threading.Event()

    @app.handler("short", queue=queue)
    def short(payload: object) -> None:
        started.set()
        time.sleep(0.3)

    sub = await rdq.Client(storage, app).submit("short")
    async with running(fast_worker(app, storage, grace_period=30)):
        await eventually(lambda: asyncio.to_thread(started.is_set))
    task = await storage.get(sub.id)
    assert task.status == Status.SUCCEEDED
    assert [a.outcome for a in task.attempts] == [Outcome.SUCCEEDED]


async def test_sigterm_stops_claiming_and_drains(queue):
    app = rdq.App()
    app.queue(queue, timeout=60)
    started = asyncio.Event()

    @app.handler("slow", queue=queue)
    async def slow(payload: object) -> None:
        started.set()
        await asyncio.sleep(60)

    async with MemoryStorage() as storage:
        client = rdq.Client(storage, app)
        sub = await client.submit("slow")
        worker = fast_worker(app, storage, grace_period=0.2)
        run = asyncio.create_task(worker.run())
        await asyncio.sleep(0)
        worker.install_signal_handlers()
        try:
            await asyncio.wait_for(started.wait(), 30)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(run, 30)
        finally:
            loop = asyncio.get_running_loop()
            loop.remove_signal_handler(signal.SIGTERM)
            loop.remove_signal_handler(signal.SIGINT)
        later = await client.submit("slow")
        task = await storage.get(sub.id)
        assert [a.outcome for a in task.attempts] == [Outcome.INTERRUPTED]
        assert (await storage.get(later.id)).status == Status.PENDING  # nothing claims now


@pytest.mark.parametrize("reply", ["empty", "refused"])
async def test_a_stop_while_a_claim_is_out_ends_the_worker_without_a_wait(
    queue, reply, monkeypatch
):
    """A stop that arrives while a claim is on its way: the worker exits when the claim
    comes back empty or fails, not after the idle wait (up to ``poll_max``) or the outage
    backoff it would begin next (both made ten minutes long here)."""
    monkeypatch.setattr("rdq.worker._claiming.OUTAGE_RETRY_FIRST", 600.0)
    monkeypatch.setattr("rdq.worker._claiming.OUTAGE_RETRY_CAP", 600.0)
    app = rdq.App()
    app.queue(queue)

    @app.handler("job", queue=queue)
    async def job(payload: object) -> None:
        return None

    claim_out = asyncio.Event()
    stopped = asyncio.Event()

    async def around(name: str, call: Any) -> Any:
        if name == "claim_due" and not stopped.is_set():
            claim_out.set()
            await stopped.wait()
            if reply == "refused":
                raise rdq.StorageUnavailable("connection reset by peer")
        return await call()

    async with MemoryStorage() as storage:
        gated = FaultyStorage(storage, around=around)
        worker = fast_worker(app, gated, poll_max=600.0)  # type: ignore[arg-type]
        run = asyncio.create_task(worker.run())
        await asyncio.wait_for(claim_out.wait(), 30)
        worker.stop()
        stopped.set()
        await asyncio.wait_for(run, 30)
        assert gated.calls["claim_due"] == 1


async def test_worker_ids_are_unique_per_worker():
    app = rdq.App()
    async with MemoryStorage() as storage:
        ids = {rdq.Worker(app, storage).worker_id for _ in range(20)}
    assert len(ids) == 20
    host, pid, _ = next(iter(ids)).rsplit(":", 2)
    assert pid == str(os.getpid())
    assert host


@pytest.mark.looptime
async def test_lost_lease_cancels_the_handler_and_writes_nothing():
    """The first renewal, a third of the lease after the claim, is refused: the handler is
    cancelled then, and nothing of its attempt is written."""
    app = rdq.App()
    app.queue("q", lease=30.0, timeout=600)
    cancelled = asyncio.Event()
    times: dict[str, float] = {}
    loop = asyncio.get_running_loop()

    @app.handler("long", queue="q")
    async def long(payload: object) -> None:
        times["started"] = loop.time()
        try:
            await asyncio.sleep(600)
        except asyncio.CancelledError:
            times["cancelled"] = loop.time()
            cancelled.set()
            raise

    async with virtual_store() as memory:
        sub = await rdq.Client(memory, app).submit("long")
        flaky = FaultyStorage(memory, {"extend_lease": (1, rdq.StaleClaim(sub.id))})
        before = metrics.STALE_CLAIMS.labels("q")._value.get()
        log = Recorder()
        async with worker(app, flaky, logger=log):
            await cancelled.wait()
        task = await memory.get(sub.id)
    assert metrics.STALE_CLAIMS.labels("q")._value.get() == before + 1
    # told apart from a cancel: the task is not CANCELLED, so the lease was lost
    [line] = log.events("lease lost; abandoning the handler")
    assert line["task_id"] == sub.id
    assert not log.events("task cancelled by an operator")
    assert task.status == Status.IN_FLIGHT and task.attempts == [], "nothing written"
    renewal = times["cancelled"] - times["started"]
    assert 10.0 <= renewal <= 10.0 + MAX_TICK, f"cancelled {renewal}s after it started"


@pytest.mark.looptime
async def test_a_task_that_keeps_losing_its_lease_ends_in_the_dlq():
    """Crashed workers' attempts count: a poison task cannot loop forever."""
    app = rdq.App()
    app.queue("q", max_attempts=1)

    @app.handler("poison", queue="q")
    async def poison(payload: object) -> None:
        raise AssertionError("must not run: its attempts are used up")

    async with virtual_store() as storage:
        sub = await rdq.Client(storage, app).submit("poison")
        # a worker claims it and dies (never resolves); the lease runs out
        [claimed] = await storage.claim_due("q", 1, timedelta(seconds=30))
        async with worker(app, storage):
            task = await settle(storage, sub.id, Status.DEAD)
    assert [(a.outcome, a.error_type) for a in task.attempts] == [
        (Outcome.LEASE_EXPIRED, task.attempts[0].error_type),
        (Outcome.PERMANENT, "rdq.AttemptsExhausted"),
    ]
    expires, lapsed = claimed.task.lease_expires_at, task.attempts[0].finished_at
    assert expires is not None and lapsed is not None
    assert 0.0 <= (lapsed - expires).total_seconds() <= POLL, "dead-lettered once it lapsed"


@pytest.mark.looptime
async def test_only_outages_are_retried_and_an_unwritten_outcome_is_logged():
    """A resolution refused with a StorageError that is not an outage is not retried (it
    would fail the same way); the outcome it carried is logged, not dropped in silence, and
    the task runs again once its lease expires."""
    app = rdq.App()
    app.queue("q", lease=30.0, max_attempts=3, backoff=rdq.Backoff.fixed(0.05))
    runs: list[int] = []

    @app.handler("job", queue="q")
    async def job(payload: object, ctx: rdq.TaskContext) -> None:
        runs.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("upstream said no")

    async with virtual_store() as storage:
        sub = await rdq.Client(storage, app).submit("job")
        refused = rdq.StorageError("check constraint violated")
        flaky = FaultyStorage(storage, {"reschedule": (1, refused)})
        log = Recorder()
        async with worker(app, flaky, logger=log):
            task = await settle(storage, sub.id, Status.SUCCEEDED)
    assert flaky.calls["reschedule"] == 1  # not retried
    [line] = log.events("could not record the outcome")
    assert (line["outcome"], line["error_type"], line["error"]) == (
        "FAILED",
        "ConnectionError",
        "upstream said no",
    )
    assert "check constraint violated" in line["storage_error"]
    lapsed, ran = task.attempts
    assert (lapsed.outcome, ran.outcome) == (Outcome.LEASE_EXPIRED, Outcome.SUCCEEDED)
    assert runs == [1, 2]
    assert lapsed.started_at is not None and lapsed.finished_at is not None
    held = (lapsed.finished_at - lapsed.started_at).total_seconds()
    assert 30.0 <= held <= 30.0 + POLL, f"run again {held}s after the claim, not one lease"


class CountingRandom(random.Random):
    def __init__(self) -> None:
        super().__init__(7)
        self.draws = 0

    def random(self) -> float:
        self.draws += 1
        return super().random()


@pytest.mark.looptime
async def test_write_retries_draw_their_jitter_from_the_workers_rng():
    """An outcome write retried through an outage waits a jittered pause drawn from the
    random generator the worker was given (so a seeded worker is reproducible)."""
    app = rdq.App()
    app.queue("q", backoff=rdq.Backoff.fixed(0.05))

    @app.handler("job", queue="q")
    async def job(payload: object) -> None:
        return None

    outage = rdq.StorageUnavailable("connection refused (127.0.0.1:5432)")
    rng = CountingRandom()
    async with virtual_store() as storage:
        sub = await rdq.Client(storage, app).submit("job")
        flaky = FaultyStorage(
            storage, {"complete": (3, outage)}, capabilities={"batch_complete": False}
        )
        async with worker(app, flaky, rng=rng):
            await settle(storage, sub.id, Status.SUCCEEDED)
    assert flaky.calls["complete"] == 4
    assert rng.draws >= 3


async def _called(flaky: FaultyStorage, name: str) -> bool:
    return flaky.calls[name] > 0


class LostClaimReply(FaultyStorage):
    """The first ``claim_due`` is applied by the store, but its reply never arrives (the
    connection dropped after the commit)."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner, {})
        self.lost: list[str] = []

    async def claim_due(self, *args: Any, **kwargs: Any) -> Any:
        claimed = await self.inner.claim_due(*args, **kwargs)
        if claimed and not self.lost:
            self.lost.extend(c.task.id for c in claimed)
            raise rdq.StorageUnavailable("connection reset by peer")
        return claimed


@pytest.mark.looptime
@pytest.mark.parametrize("max_attempts", [2, 1])
async def test_a_lost_claim_reply_costs_one_lease_and_one_attempt(max_attempts):
    """What a claim whose reply was lost costs: the task waits out one lease, then is
    reclaimed with a ``LEASE_EXPIRED`` record naming the worker that claimed it, and that
    record counts as an attempt (with ``max_attempts=1`` the task is dead-lettered unrun)."""
    app = rdq.App()
    app.queue("q", lease=30.0, max_attempts=max_attempts)
    runs: list[int] = []

    @app.handler("job", queue="q")
    async def job(payload: object, ctx: rdq.TaskContext) -> None:
        runs.append(ctx.attempt)

    final = Status.SUCCEEDED if max_attempts > 1 else Status.DEAD
    async with virtual_store() as storage:
        sub = await rdq.Client(storage, app).submit("job")
        lossy = LostClaimReply(storage)
        async with worker(app, lossy) as claimer:
            task = await settle(storage, sub.id, final)
    assert lossy.lost == [sub.id]
    expired = task.attempts[0]
    assert expired.outcome == Outcome.LEASE_EXPIRED
    assert expired.worker_id == claimer.worker_id
    assert expired.started_at is not None and expired.finished_at is not None
    held = (expired.finished_at - expired.started_at).total_seconds()
    assert 30.0 <= held <= 30.0 + POLL, f"reclaimed {held}s after the claim, not one lease"
    if max_attempts > 1:
        assert [a.outcome for a in task.attempts[1:]] == [Outcome.SUCCEEDED]
        assert runs == [2]
    else:
        assert [(a.outcome, a.error_type) for a in task.attempts[1:]] == [
            (Outcome.PERMANENT, "rdq.AttemptsExhausted")
        ]
        assert runs == []
