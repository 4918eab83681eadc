"""Successes recorded in batches (``complete_many``) where the store offers ``batch_complete``,
one ``complete`` each where it does not: both drain every task to exactly one success."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import pytest

import rdq
from rdq import metrics
from rdq.spi import Capabilities, Completion, ForwardingStorage, Outcome, Status, Storage
from rdq.worker import DEFAULT_MAX_UNRECORDED

from ._virtual import POLL, virtual_store, worker
from .conftest import Recorder, eventually, fast_worker, running

pytestmark = pytest.mark.asyncio

PATHS = pytest.mark.parametrize("batched", [True, False], ids=["batched", "single"])


class StoreView(ForwardingStorage):
    """A real store advertising ``batch_complete`` or not, recording the completion calls,
    with an optional hook around each of them (``complete`` passes its one item) for the
    faults a healthy server cannot be made to produce on cue (an outage mid-flush, a write
    that is slow to return)."""

    def __init__(
        self,
        inner: Storage,
        *,
        batch_complete: bool,
        overlapping_completions: bool = False,
        around_flush: Callable[[Sequence[Completion], Callable[[], Awaitable[Any]]], Awaitable[Any]]
        | None = None,
    ) -> None:
        super().__init__(inner)
        self._batch_complete = batch_complete
        self._overlapping = overlapping_completions
        self._around_flush = around_flush
        self.flushes: list[int] = []
        """The size of each ``complete_many`` call, in order."""
        self.completes = 0

    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(
            self.inner.capabilities(),
            batch_complete=self._batch_complete,
            overlapping_completions=self._overlapping,
        )

    async def complete(self, task_id: str, token: str, attempt: Any) -> None:
        self.completes += 1
        if self._around_flush is None:
            await self.inner.complete(task_id, token, attempt)
        else:
            item = Completion(task_id, token, attempt)
            await self._around_flush([item], lambda: self.inner.complete(task_id, token, attempt))

    async def complete_many(self, completions: Sequence[Completion]) -> Any:
        self.flushes.append(len(completions))
        if self._around_flush is None:
            return await self.inner.complete_many(completions)
        return await self._around_flush(completions, lambda: self.inner.complete_many(completions))


def counting_app(queue: str, concurrency: int = 10, **config: Any) -> tuple[rdq.App, Any]:
    """An app whose handler counts its runs per task id; the first ``concurrency`` runs wait
    for each other, so their completions arrive together."""
    app = rdq.App()
    app.queue(queue, concurrency=concurrency, **config)
    runs: collections.Counter[str] = collections.Counter()
    gate = asyncio.Event()

    @app.handler("job", queue=queue)
    async def job(payload: object, ctx: rdq.TaskContext) -> None:
        runs[ctx.task_id] += 1
        if sum(runs.values()) >= concurrency:
            gate.set()
        await asyncio.wait_for(gate.wait(), 30)

    return app, runs


async def submit(storage: Storage, queue: str, count: int) -> list[str]:
    subs = await rdq.Client(storage).submit_many(
        [rdq.Submission("job", i, queue=queue) for i in range(count)]
    )
    return [s.id for s in subs]


async def all_settled(storage: Storage, ids: list[str], status: Status = Status.SUCCEEDED) -> None:
    async def check() -> bool:
        for task_id in ids:
            if (await storage.get(task_id)).status != status:
                return False
        return True

    await eventually(check, f"{len(ids)} tasks {status}", 60, interval=0.1)


async def successes(storage: Storage, task_id: str) -> int:
    task = await storage.get(task_id)
    return sum(1 for a in task.attempts if a.outcome == Outcome.SUCCEEDED)


@PATHS
async def test_every_task_succeeds_exactly_once(storage, queue, batched):
    app, runs = counting_app(queue)
    ids = await submit(storage, queue, 120)
    view = StoreView(storage, batch_complete=batched)
    async with running(fast_worker(app, view)):  # type: ignore[arg-type]
        await all_settled(storage, ids)
    for task_id in ids:
        task = await storage.get(task_id)
        assert [a.outcome for a in task.attempts] == [Outcome.SUCCEEDED], task_id
    assert set(runs) == set(ids) and set(runs.values()) == {1}
    if batched:
        assert view.completes == 0 and sum(view.flushes) == len(ids)
        assert max(view.flushes) > 1  # the gated first runs finish together: one flush
    else:
        assert view.completes == len(ids) and view.flushes == []


async def test_a_stale_item_in_a_batch_is_counted_and_spares_the_others(storage, queue):
    app, _ = counting_app(queue)
    ids = await submit(storage, queue, 10)
    victim: list[str] = []

    async def steal_one(items: Sequence[Completion], flush: Any) -> Any:
        # the first flush carries one completion whose lease another worker took over
        if not victim:
            victim.append(items[0].task_id)
            items = [msgspec.structs.replace(items[0], token="taken-over"), *items[1:]]
            return await storage.complete_many(items)
        return await flush()

    view = StoreView(storage, batch_complete=True, around_flush=steal_one)
    before = metrics.STALE_CLAIMS.labels(queue)._value.get()
    async with running(fast_worker(app, view)):  # type: ignore[arg-type]
        await eventually(lambda: _settled_except(storage, ids, victim))
    assert view.flushes[0] > 1
    assert metrics.STALE_CLAIMS.labels(queue)._value.get() == before + 1
    assert (await storage.get(victim[0])).status == Status.IN_FLIGHT  # until its lease ends
    others = [i for i in ids if i not in victim]
    assert len(others) == len(ids) - 1
    for task_id in others:
        assert await successes(storage, task_id) == 1


async def _settled_except(storage: Storage, ids: list[str], skipped: list[str]) -> bool:
    for task_id in ids:
        if task_id not in skipped and (await storage.get(task_id)).status != Status.SUCCEEDED:
            return False
    return bool(skipped)


@pytest.mark.parametrize("applied", [False, True], ids=["refused", "reply-lost"])
async def test_an_outage_during_a_flush_neither_loses_nor_doubles_a_success(
    storage, queue, applied
):
    """The first two flushes fail as a whole, before or after the store applied them: the
    completions are retried, and every task ends with exactly one success."""
    app, runs = counting_app(queue)
    ids = await submit(storage, queue, 30)
    failures = [2]

    async def outage(items: Sequence[Completion], flush: Any) -> Any:
        if failures[0] > 0:
            failures[0] -= 1
            if applied:
                await flush()  # committed, but the reply never arrived
            raise rdq.StorageUnavailable("connection reset (127.0.0.1:5432)")
        return await flush()

    view = StoreView(storage, batch_complete=True, around_flush=outage)
    async with running(fast_worker(app, view)):  # type: ignore[arg-type]
        await all_settled(storage, ids)
    assert failures == [0]
    for task_id in ids:
        assert await successes(storage, task_id) == 1, task_id
    assert set(runs.values()) == {1}  # retried writes, not re-run handlers


@pytest.mark.looptime
async def test_an_outage_longer_than_the_lease_ends_in_a_rerun_not_a_loss():
    """When the store cannot record completions for longer than the engine keeps retrying,
    the tasks are reclaimed when their lease lapses and run again: every one still ends
    SUCCEEDED exactly once (at-least-once). On simulated time: the outage outlasts three
    leases."""
    app, runs = counting_app("q", concurrency=5, lease=10.0)
    refused: list[int] = []
    log = Recorder()

    async def outage(items: Sequence[Completion], flush: Any) -> Any:
        # down until the engine gave an outcome up and a lease expiry ran its task again
        if max(runs.values()) < 2:
            refused.append(len(items))
            raise rdq.StorageUnavailable("connection refused (127.0.0.1:5432)")
        return await flush()

    async with virtual_store() as storage:
        ids = await submit(storage, "q", 5)
        view = StoreView(storage, batch_complete=True, around_flush=outage)
        async with worker(app, view, logger=log):
            await all_settled(storage, ids)
        tasks = [await storage.get(task_id) for task_id in ids]
    assert refused
    assert log.events("could not record the outcome")  # the engine gave up retrying the write
    rerun = 0
    for task in tasks:
        outcomes = [a.outcome for a in task.attempts]
        assert outcomes.count(Outcome.SUCCEEDED) == 1, outcomes
        assert outcomes[-1] == Outcome.SUCCEEDED
        assert set(outcomes[:-1]) <= {Outcome.LEASE_EXPIRED}, outcomes
        for lapsed in task.attempts[:-1]:
            assert lapsed.started_at is not None and lapsed.finished_at is not None
            held = (lapsed.finished_at - lapsed.started_at).total_seconds()
            # the write is retried (and the lease renewed) for two leases after the handler
            # ended; once given up, the lease lapses within one more
            assert 2 * 10.0 <= held <= 3 * 10.0 + POLL, f"run again {held}s after the claim"
        rerun += len(outcomes) > 1
    assert rerun > 0  # the lease expiry, recorded, re-ran what the engine gave up


@PATHS
async def test_shutdown_waits_for_completions_being_written(storage, queue, batched):
    """stop() with no grace period while successes wait for a slow flush (and more queue up
    behind it): the worker records them all before run() returns; none is interrupted."""
    app = rdq.App()
    app.queue(queue, concurrency=20)
    slow_write = asyncio.Event()
    release = asyncio.Event()
    behind: list[int] = []

    @app.handler("job", queue=queue)
    async def job(payload: int) -> None:
        if payload >= 10:  # finishes while the first flush is in flight
            await slow_write.wait()
            behind.append(payload)

    async def held(flush: Callable[[], Awaitable[Any]]) -> Any:
        slow_write.set()
        await release.wait()
        return await flush()

    view = StoreView(storage, batch_complete=batched, around_flush=lambda items, flush: held(flush))
    ids = await submit(storage, queue, 20)
    worker = fast_worker(app, view, grace_period=0.0)  # type: ignore[arg-type]
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(slow_write.wait(), 30)
    await eventually(lambda: _started(behind, 10))  # the other ten are done, writes pending
    worker.stop()
    # Had the worker not waited for the writes, run() would return and cancel the held
    # flush: the tasks would stay IN_FLIGHT. It may only return once the writes are let go.
    release.set()
    await asyncio.wait_for(run, 60)
    for task_id in ids:
        task = await storage.get(task_id)
        assert [a.outcome for a in task.attempts] == [Outcome.SUCCEEDED], task_id
    if batched:
        assert sum(view.flushes) == 20 and len(view.flushes) < 20


async def test_a_success_waiting_for_its_batch_gives_its_slot_to_the_next_task(storage, queue):
    """With concurrency 1, ``max_unrecorded=1`` and every flush held: the second task starts
    while the first one's success is still being written, but the third waits (though the
    second's success has a flush of its own in flight), because the worker lets at most
    ``max_unrecorded`` successes wait for their flush while their slots are reused."""
    app = rdq.App()
    app.queue(queue, concurrency=1)
    started: list[int] = []
    first_flush = asyncio.Event()
    release = asyncio.Event()
    released_when_started: list[bool] = []

    @app.handler("job", queue=queue)
    async def job(payload: int) -> None:
        started.append(payload)
        released_when_started.append(release.is_set())

    async def held(flush: Callable[[], Awaitable[Any]]) -> Any:
        first_flush.set()
        await release.wait()
        return await flush()

    view = StoreView(storage, batch_complete=True, around_flush=lambda items, flush: held(flush))
    ids = await submit(storage, queue, 3)
    async with running(fast_worker(app, view, max_unrecorded=1)):  # type: ignore[arg-type]
        await asyncio.wait_for(first_flush.wait(), 30)
        await eventually(lambda: _started(started, 2))
        first = ids[started[0]]
        assert (await storage.get(first)).status == Status.IN_FLIGHT  # not yet recorded
        release.set()
        await all_settled(storage, ids)
    assert sorted(started) == [0, 1, 2]
    # the second started while the first one's write was held; the third only after it
    assert released_when_started == [False, False, True]
    for task_id in ids:
        assert await successes(storage, task_id) == 1


async def _started(started: list[int], count: int) -> bool:
    return len(started) >= count


@pytest.mark.parametrize(
    ("max_unrecorded", "bound"), [(0, 0), (3, 3), (None, DEFAULT_MAX_UNRECORDED)]
)
async def test_max_unrecorded_bounds_the_successes_whose_slots_go_on_before_their_write(
    storage, queue, max_unrecorded, bound
):
    """With concurrency 1 and the first flush held, ``max_unrecorded`` successes waiting for
    their write hand their slot on (100 unless given: more than the concurrency); the one
    after them keeps its slot, so exactly ``bound + 1`` tasks have run before the write
    returns, and no more."""
    app = rdq.App()
    app.queue(queue, concurrency=1)
    started: list[int] = []
    first_flush = asyncio.Event()
    release = asyncio.Event()

    @app.handler("job", queue=queue)
    async def job(payload: int) -> None:
        started.append(payload)

    async def held(flush: Callable[[], Awaitable[Any]]) -> Any:
        if not first_flush.is_set():
            first_flush.set()
            await release.wait()
        return await flush()

    view = StoreView(storage, batch_complete=True, around_flush=lambda items, flush: held(flush))
    ids = await submit(storage, queue, bound + 3)
    worker = fast_worker(app, view, max_unrecorded=max_unrecorded)  # type: ignore[arg-type]
    async with running(worker):
        await asyncio.wait_for(first_flush.wait(), 30)
        await eventually(lambda: _started(started, bound + 1))
        await asyncio.sleep(0.3)  # the next task would have started by now if it could
        assert len(started) == bound + 1
        release.set()
        await all_settled(storage, ids)
    assert sorted(started) == list(range(bound + 3))
    for task_id in ids:
        assert await successes(storage, task_id) == 1


@pytest.mark.parametrize("overlapping", [True, False], ids=["overlapping", "one-flush"])
async def test_the_next_batch_is_written_while_the_first_is_still_in_flight(
    storage, queue, overlapping
):
    """With the first flush held, on a store that advertises ``overlapping_completions``: the
    successes of the tasks that ran meanwhile go out in a second flush and are recorded while
    the first one is still in flight, and never more than two flushes are in flight at once.
    Without it, nothing is recorded until the first flush returns."""
    app = rdq.App()
    app.queue(queue, concurrency=1)
    release = asyncio.Event()
    held_ids: list[str] = []
    in_flight = 0
    most_in_flight = 0

    @app.handler("job", queue=queue)
    async def job(payload: int) -> None:
        pass

    async def held(items: Sequence[Completion], flush: Callable[[], Awaitable[Any]]) -> Any:
        nonlocal in_flight, most_in_flight
        in_flight += 1
        most_in_flight = max(most_in_flight, in_flight)
        try:
            if not held_ids:
                held_ids.extend(item.task_id for item in items)
                await release.wait()
            return await flush()
        finally:
            in_flight -= 1

    view = StoreView(
        storage, batch_complete=True, overlapping_completions=overlapping, around_flush=held
    )
    ids = await submit(storage, queue, 6)
    async with running(fast_worker(app, view)):  # type: ignore[arg-type]
        if overlapping:
            await eventually(lambda: _any_succeeded(storage, ids), "a success recorded", 30)
        else:
            await eventually(lambda: _any_held(held_ids), "the first flush", 30)
            await asyncio.sleep(0.5)  # time a second flush would have taken to be recorded
            assert not await _any_succeeded(storage, ids)
        for task_id in held_ids:
            assert (await storage.get(task_id)).status == Status.IN_FLIGHT  # still held
        release.set()
        await all_settled(storage, ids)
    assert held_ids and most_in_flight == (2 if overlapping else 1)
    for task_id in ids:
        assert await successes(storage, task_id) == 1


@pytest.mark.parametrize("value", [-1, 10_001, 2.5, True])
async def test_max_unrecorded_out_of_range_is_refused_naming_it(storage, value):
    with pytest.raises(rdq.ConfigError, match="max_unrecorded"):
        rdq.Worker(rdq.App(), storage, max_unrecorded=value)


async def _any_succeeded(storage: Storage, ids: list[str]) -> bool:
    for task_id in ids:
        if (await storage.get(task_id)).status == Status.SUCCEEDED:
            return True
    return False


async def _any_held(held_ids: list[str]) -> bool:
    return bool(held_ids)
