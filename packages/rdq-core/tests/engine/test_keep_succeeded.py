"""A queue that keeps no succeeded task (``keep_succeeded = False``): each task runs once and
leaves the store as its success is recorded; failures still retry, dead-letter and stay."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from datetime import timedelta
from typing import Any

import msgspec
import pytest

import rdq
from rdq.errors import ConfigError, NotFound, Unsupported
from rdq.spi import Capabilities, ForwardingStorage, Outcome, Status, Storage
from rdq_memory import MemoryStorage

from .conftest import Recorder, eventually, fast_worker, running, wait_status


async def _gone(storage: Storage, task_id: str) -> bool:
    try:
        await storage.get(task_id)
    except NotFound:
        return True
    return False


def _app(queue: str, calls: collections.Counter[str], lock: threading.Lock) -> rdq.App:
    app = rdq.App()
    app.queue(queue, keep_succeeded=False, max_attempts=3, backoff=rdq.Backoff.fixed(0.05))

    @app.handler("ok", queue=queue)
    def ok(payload: dict, ctx: rdq.TaskContext) -> None:
        with lock:
            calls[ctx.task_id] += 1

    @app.handler("flaky", queue=queue)
    def flaky(payload: dict, ctx: rdq.TaskContext) -> None:
        with lock:
            calls[ctx.task_id] += 1
        if ctx.attempt < 2:
            raise ConnectionError("upstream refused")

    @app.handler("broken", queue=queue)
    def broken(payload: dict, ctx: rdq.TaskContext) -> None:
        with lock:
            calls[ctx.task_id] += 1
        raise RuntimeError("always")

    return app


class _OneByOne(ForwardingStorage):
    """A real store without ``batch_complete``: every success is one ``complete`` call."""

    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(self.inner.capabilities(), batch_complete=False)


async def _drain(storage: Storage, queue: str) -> None:
    calls: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    app = _app(queue, calls, lock)
    client = rdq.Client(storage, app)
    oks = [(await client.submit("ok", {"n": n})).id for n in range(30)]
    flaky = (await client.submit("flaky", {})).id
    broken = (await client.submit("broken", {})).id
    async with running(fast_worker(app, storage)):
        dead = await wait_status(storage, broken, Status.DEAD)

        async def all_gone() -> bool:
            return all([await _gone(storage, i) for i in [*oks, flaky]])

        await eventually(all_gone, "every succeeded task deleted")
    assert {i: calls[i] for i in oks} == dict.fromkeys(oks, 1), "a task ran more than once"
    assert calls[flaky] == 2, "the flaky task was not retried once"
    assert [a.outcome for a in dead.attempts] == [Outcome.FAILED] * 3
    stats = await storage.stats(queue)
    counted = (stats.pending, stats.in_flight, stats.succeeded, stats.dlq_depth)
    assert counted == (0, 0, 0, 1), stats
    await asyncio.sleep(0.3)  # nothing runs again
    assert calls[broken] == 3 and sum(calls.values()) == 30 + 2 + 3


@pytest.mark.asyncio
async def test_succeeded_tasks_leave_the_store_and_failures_still_retry_and_dead_letter(
    storage: Storage, queue: str
) -> None:
    await _drain(storage, queue)


@pytest.mark.asyncio
async def test_one_complete_per_success_discards_too(storage: Storage, queue: str) -> None:
    await _drain(_OneByOne(storage), queue)


@pytest.mark.asyncio
async def test_a_resubmitted_id_of_a_discarded_task_is_a_new_task(
    storage: Storage, queue: str
) -> None:
    calls: collections.Counter[str] = collections.Counter()
    app = _app(queue, calls, threading.Lock())
    client = rdq.Client(storage, app)
    first = await client.submit("ok", {}, id="order-1-" + queue)
    assert first.created

    async def ran_twice() -> bool:
        return calls[first.id] == 2

    async with running(fast_worker(app, storage)):
        await eventually(lambda: _gone(storage, first.id), "the first task deleted")
        again = await client.submit("ok", {}, id=first.id)
        assert again.created, "an id is recognised only while its task lives"
        await eventually(ran_twice, "the resubmitted task run")
        await eventually(lambda: _gone(storage, first.id), "the second task deleted")


@pytest.mark.asyncio
async def test_a_queue_that_keeps_its_succeeded_tasks_still_does(
    storage: Storage, queue: str
) -> None:
    app = rdq.App()
    app.queue(queue)
    app.register("ok", lambda: None, queue=queue)
    sub = await rdq.Client(storage, app).submit("ok")
    async with running(fast_worker(app, storage)):
        task = await wait_status(storage, sub.id, Status.SUCCEEDED)
    assert task.completed_at is not None and task.attempt_count == 1


@pytest.mark.asyncio
async def test_a_schedules_ticks_are_kept_so_that_racing_workers_run_each_once(
    storage: Storage, queue: str
) -> None:
    """A tick's task is what tells every scheduler the tick was enqueued: deleted, a worker
    that comes to the tick later (or restarts within its grace) would enqueue it again."""
    app = rdq.App()
    app.queue(queue, concurrency=4, keep_succeeded=False)
    runs: collections.Counter[str] = collections.Counter()

    @app.handler("tick", queue=queue)
    async def tick(payload: object, ctx: rdq.TaskContext) -> None:
        runs[ctx.headers["rdq-schedule-tick"]] += 1

    schedule = app.schedule(f"every-second-{queue}", tick, every=timedelta(seconds=1))
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(3):
            await stack.enter_async_context(running(fast_worker(app, storage)))
        start = await storage.now()
        expected = [schedule.next_tick(start + timedelta(seconds=i)) for i in range(3)]
        for at in expected:
            assert at is not None
            await wait_task(storage, schedule.task_id(at), Status.SUCCEEDED)
        await asyncio.sleep(0.5)  # a scheduler that came late would enqueue it again now
    assert [runs[at.isoformat()] for at in expected if at is not None] == [1, 1, 1], runs


async def wait_task(storage: Storage, task_id: str, status: Status) -> rdq.spi.Envelope:
    """Wait until task ``task_id`` exists and has ``status``."""

    async def check() -> rdq.spi.Envelope | None:
        try:
            task = await storage.get(task_id)
        except NotFound:
            return None
        return task if task.status == status else None

    return await eventually(check, f"task {task_id} {status}")


class _RepliesLost(ForwardingStorage):
    """A real store whose first completion write of each path goes through but whose reply
    is lost (``StorageUnavailable``), as a connection reset after the commit does."""

    def __init__(self, inner: Storage, *, batch_complete: bool) -> None:
        super().__init__(inner)
        self._batch_complete = batch_complete
        self.lost = 0

    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(
            self.inner.capabilities(), batch_complete=self._batch_complete
        )

    async def complete(self, task_id: str, token: str, attempt: Any, **kw: Any) -> None:
        await self.inner.complete(task_id, token, attempt, **kw)
        self._lose()

    async def complete_many(self, completions: Any) -> Any:
        results = await self.inner.complete_many(completions)
        self._lose()
        return results

    def _lose(self) -> None:
        if self.lost < 2:
            self.lost += 1
            raise rdq.StorageUnavailable("connection reset (127.0.0.1:5432)")


@pytest.mark.asyncio
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "single"])
async def test_a_discard_whose_reply_an_outage_lost_is_a_success_not_a_vanished_task(
    batched: bool,
) -> None:
    calls: collections.Counter[str] = collections.Counter()
    app = _app("q", calls, threading.Lock())
    log = Recorder()
    async with MemoryStorage() as inner:
        store = _RepliesLost(inner, batch_complete=batched)
        client = rdq.Client(inner, app)
        ids = [(await client.submit("ok", {"n": n})).id for n in range(5)]
        async with running(fast_worker(app, store, logger=log)):

            async def all_gone() -> bool:
                return all([await _gone(inner, i) for i in ids])

            await eventually(all_gone, "every task deleted")
            await asyncio.sleep(0.3)
    assert store.lost == 2
    assert {i: calls[i] for i in ids} == dict.fromkeys(ids, 1)
    assert not log.events("task vanished"), log.events("task vanished")


class _Keeping(MemoryStorage):
    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(super().capabilities(), discard_succeeded=False)


@pytest.mark.asyncio
async def test_a_worker_refuses_a_queue_that_keeps_no_succeeded_task_on_a_store_that_must() -> None:
    app = rdq.App()
    app.queue("mail", keep_succeeded=False)
    app.register("send", lambda: None, queue="mail")
    async with _Keeping() as store:
        await rdq.Client(store, app).submit("send")
        with pytest.raises(Unsupported) as caught:
            await fast_worker(app, store, queues=["mail"]).run()
        assert caught.value.capability == "discard_succeeded"
        assert "queue 'mail' with keep_succeeded = False" in str(caught.value)
        assert (await store.stats("mail")).pending == 1, "the worker ran a task before refusing"


@pytest.mark.asyncio
async def test_a_store_without_the_capability_refuses_a_discard_and_changes_nothing() -> None:
    async with _Keeping() as store:
        await store.enqueue(rdq.spi.Envelope(id="t-1", queue="q", handler_ref="h"))
        (claimed,) = await store.claim_due("q", 1, rdq.spi.bounds.MAX_LEASE)
        done = rdq.spi.Attempt(number=1, outcome=Outcome.SUCCEEDED)
        with pytest.raises(Unsupported):
            await store.complete("t-1", claimed.token, done, discard=True)
        with pytest.raises(Unsupported):
            await store.complete_many([rdq.spi.Completion("t-1", claimed.token, done, True)])
        assert (await store.get("t-1")).status == Status.IN_FLIGHT


def test_keep_succeeded_from_code_mappings_and_toml_and_bad_values_are_named(tmp_path) -> None:
    assert rdq.QueueConfig().keep_succeeded is True
    app = rdq.App()
    assert app.queue("a", keep_succeeded=False).keep_succeeded is False
    app.configure(
        {"defaults": {"keep_succeeded": False}, "queues": {"b": {"keep_succeeded": True}}}
    )
    assert (app.queue_config("b").keep_succeeded, app.queue_config("c").keep_succeeded) == (
        True,
        False,
    )
    path = tmp_path / "rdq.toml"
    path.write_text("[queues.mail]\nkeep_succeeded = false\n")
    app = rdq.App()
    app.load_config(path)
    assert app.queue_config("mail").keep_succeeded is False
    with pytest.raises(ConfigError) as caught:
        rdq.App().configure({"queues": {"mail": {"keep_succeeded": "no"}}})
    assert caught.value.key == "queues.mail.keep_succeeded"
    with pytest.raises(ConfigError) as caught:
        rdq.QueueConfig(keep_succeeded=0).validate("mail")  # type: ignore[arg-type]
    assert caught.value.key == "queues.mail.keep_succeeded"
