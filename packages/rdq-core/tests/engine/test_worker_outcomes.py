"""End to end on each backend: handlers run and every outcome lands where docs/engine.md says.
The tests that wait out a backoff or a fence run on simulated time on the memory store
(``_virtual.py``), where the figure is checked exactly; so do the retry-after and heartbeat
tests of test_virtual_time.py. One backoff stays on each backend's real clock: the worker's
estimate of a real server's clock."""

from __future__ import annotations

import asyncio
import threading
import uuid

import msgspec
import pytest

import rdq
from rdq.retry import backoff_bounds
from rdq.spi import DLQFilter, Outcome, Page, RetryOverride, Selector, Status
from rdq.worker._heartbeat import FENCE_AFTER, MAX_TICK

from ._virtual import POLL, gaps, settle, virtual_store, worker
from .conftest import Recorder, eventually, fast_worker, running, wait_status

pytestmark = pytest.mark.asyncio


class Order(msgspec.Struct):
    order_id: int
    amount: float


@pytest.mark.looptime
async def test_flaky_handler_succeeds_on_attempt_3_with_backoff_in_bounds():
    app = rdq.App()
    backoff = rdq.Backoff.exponential(base=2.0, cap=3.0)
    app.queue("q", max_attempts=5, backoff=backoff)

    @app.handler("flaky", queue="q")
    async def flaky(payload: dict, ctx: rdq.TaskContext) -> None:
        if ctx.attempt < 3:
            raise ConnectionError(f"upstream refused (attempt {ctx.attempt})")

    async with virtual_store() as storage:
        sub = await rdq.Client(storage, app).submit("flaky", {"order": 1})
        async with worker(app, storage) as running_worker:
            task = await settle(storage, sub.id, Status.SUCCEEDED)
    assert [a.outcome for a in task.attempts] == [Outcome.FAILED, Outcome.FAILED, Outcome.SUCCEEDED]
    assert [a.number for a in task.attempts] == [1, 2, 3]
    assert task.attempts[0].error_type == "ConnectionError"
    assert task.attempts[0].error_message == "upstream refused (attempt 1)"
    assert {a.worker_id for a in task.attempts} == {running_worker.worker_id}
    for n, gap in enumerate(gaps(task), start=1):
        low, high = backoff_bounds(backoff, n)
        assert low <= gap <= high + POLL, (n, gap, (low, high))


async def test_fixed_backoff_waits_at_least_the_delay_by_the_storage_clock(storage, queue):
    """On real time, against the server's own clock (the exact figure, on simulated time:
    test_virtual_time.py)."""
    app = rdq.App()
    app.queue(queue, max_attempts=3, backoff=rdq.Backoff.fixed(0.4))

    @app.handler("fails", queue=queue)
    def fails(payload: object) -> None:
        raise RuntimeError("nope")

    sub = await rdq.Client(storage, app).submit("fails")
    async with running(fast_worker(app, storage)):
        task = await wait_status(storage, sub.id, Status.DEAD)
    assert len(task.attempts) == 3
    # tolerance: the storage-clock estimate is exact to half a claim round trip
    assert all(gap >= 0.4 - 0.15 for gap in gaps(task)), gaps(task)
    assert task.dead_lettered_at is not None


async def test_exhaustion_lands_in_dlq_then_redrive_succeeds_with_history(storage, queue):
    app = rdq.App()
    app.queue(queue, max_attempts=2, backoff=rdq.Backoff.fixed(0.05))
    broken = threading.Event()
    broken.set()

    class PaymentDeclined(Exception):
        pass

    @app.handler("charge", queue=queue)
    def charge(payload: dict) -> None:
        if broken.is_set():
            raise PaymentDeclined(f"card {payload['card']} declined")

    client = rdq.Client(storage, app)
    sub = await client.submit("charge", {"card": "4242"}, id="order-77")
    async with running(fast_worker(app, storage)):
        dead = await wait_status(storage, sub.id, Status.DEAD)
        assert [a.outcome for a in dead.attempts] == [Outcome.FAILED, Outcome.FAILED]
        error_type = dead.attempts[-1].error_type
        assert error_type is not None
        assert error_type.endswith("PaymentDeclined")
        listed, _ = await storage.dlq_list(queue, DLQFilter(error_type=error_type), Page())
        assert [t.id for t in listed] == ["order-77"]
        broken.clear()  # "fix" the handler
        assert await storage.redrive(queue, Selector.by_ids("order-77")) == 1
        done = await wait_status(storage, sub.id, Status.SUCCEEDED)
    assert done.redrive_count == 1
    assert [a.outcome for a in done.attempts] == [Outcome.FAILED, Outcome.FAILED, Outcome.SUCCEEDED]


async def test_permanent_and_non_retryable_dead_letter_on_first_attempt(storage, queue):
    app = rdq.App()
    app.queue(queue, max_attempts=5, non_retryable=[LookupError])

    @app.handler("perm", queue=queue)
    async def perm(payload: object) -> None:
        try:
            int("abc")
        except ValueError as exc:
            raise rdq.Permanent("customer record is corrupt") from exc

    @app.handler("lookup", queue=queue)
    async def lookup(payload: object) -> None:
        raise KeyError("customer 42")

    client = rdq.Client(storage, app)
    a = await client.submit("perm")
    b = await client.submit("lookup")
    async with running(fast_worker(app, storage)):
        ta = await wait_status(storage, a.id, Status.DEAD)
        tb = await wait_status(storage, b.id, Status.DEAD)
    assert [(x.outcome, x.error_type) for x in ta.attempts] == [(Outcome.PERMANENT, "ValueError")]
    assert ta.attempts[0].error_message == "customer record is corrupt"
    assert [(x.outcome, x.error_type) for x in tb.attempts] == [(Outcome.PERMANENT, "KeyError")]


async def test_timeouts_async_cancelled_sync_fenced_off_worker_keeps_going(storage, queue):
    app = rdq.App()
    app.queue(queue, max_attempts=1, timeout=0.3, concurrency=1)
    release = threading.Event()
    returned = threading.Event()
    cancelled = asyncio.Event()

    @app.handler("slow_async", queue=queue)
    async def slow_async(payload: object) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    @app.handler("hangs", queue=queue)
    def hangs(payload: object) -> str:
        release.wait(60)  # a sync handler that will not return in time
        returned.set()
        return "too late"

    @app.handler("quick", queue=queue)
    def quick(payload: object) -> None:
        return None

    client = rdq.Client(storage, app)
    a = await client.submit("slow_async")
    b = await client.submit("hangs")
    try:
        async with running(fast_worker(app, storage)):
            ta = await wait_status(storage, a.id, Status.DEAD)
            tb = await wait_status(storage, b.id, Status.DEAD)
            # concurrency is 1 and a thread still hangs: the worker must still run "quick"
            c = await client.submit("quick")
            await wait_status(storage, c.id, Status.SUCCEEDED)
            assert not returned.is_set()
    finally:
        release.set()
    assert cancelled.is_set()
    for t in (ta, tb):
        assert [(x.outcome, x.error_type) for x in t.attempts] == [(Outcome.TIMEOUT, "rdq.Timeout")]


async def test_unknown_handler_and_undecodable_payload_go_to_dlq_as_permanent(storage, queue):
    app = rdq.App()
    app.queue(queue, max_attempts=5)

    seen: list[Order] = []

    @app.handler("typed", queue=queue)
    async def typed(order: Order) -> None:
        seen.append(order)

    client = rdq.Client(storage, app)
    # as another producer would submit them: this app's client refuses both
    unknown = await client.submit("no_such_handler", {"x": 1}, queue=queue, check_handler=False)
    not_allowed = await client.submit("os:system", "echo pwned", queue=queue, check_handler=False)
    bad = await client.submit("typed", {"order_id": "not a number"})
    good = await client.submit("typed", {"order_id": 7, "amount": 9.5})
    async with running(fast_worker(app, storage)):
        for sub in (unknown, not_allowed):
            t = await wait_status(storage, sub.id, Status.DEAD)
            assert [(x.outcome, x.error_type) for x in t.attempts] == [
                (Outcome.PERMANENT, "rdq.UnknownHandler")
            ]
        t = await wait_status(storage, bad.id, Status.DEAD)
        assert [(x.outcome, x.error_type) for x in t.attempts] == [
            (Outcome.PERMANENT, "rdq.UndecodablePayload")
        ]
        await wait_status(storage, good.id, Status.SUCCEEDED)
    assert seen == [Order(7, 9.5)]


async def test_bad_return_values_and_thread_killers_never_wedge_the_worker(storage, queue):
    app = rdq.App()
    app.queue(queue, max_attempts=1, concurrency=2)

    @app.handler("weird_result", queue=queue)
    async def weird_result(payload: object) -> object:
        return object()  # not serializable: results are not stored, so this is fine

    @app.handler("exits", queue=queue)
    def exits(payload: object) -> None:
        raise SystemExit(3)

    @app.handler("interrupts", queue=queue)
    async def interrupts(payload: object) -> None:
        raise KeyboardInterrupt

    client = rdq.Client(storage, app)
    a = await client.submit("weird_result")
    b = await client.submit("exits")
    c = await client.submit("interrupts")
    d = await client.submit("weird_result")
    async with running(fast_worker(app, storage)):
        await wait_status(storage, a.id, Status.SUCCEEDED)
        tb = await wait_status(storage, b.id, Status.DEAD)
        tc = await wait_status(storage, c.id, Status.DEAD)
        await wait_status(storage, d.id, Status.SUCCEEDED)
    assert tb.attempts[0].error_type == "SystemExit"
    assert tc.attempts[0].error_type == "KeyboardInterrupt"


async def test_config_change_applies_to_tasks_already_waiting(storage, queue):
    app = rdq.App()
    app.queue(queue, max_attempts=10, backoff=rdq.Backoff.fixed(0.05))

    @app.handler("always_fails", queue=queue)
    def always_fails(payload: object) -> None:
        raise RuntimeError("still broken")

    client = rdq.Client(storage, app)
    waiting = await client.submit("always_fails")
    overridden = await client.submit("always_fails", retry=RetryOverride(max_attempts=3))
    app.queue(queue, max_attempts=1)  # after submission: applies at claim time
    async with running(fast_worker(app, storage)):
        t1 = await wait_status(storage, waiting.id, Status.DEAD)
        t2 = await wait_status(storage, overridden.id, Status.DEAD)
    assert len(t1.attempts) == 1
    assert len(t2.attempts) == 3  # the task's own override wins over the queue's config


async def test_import_path_handlers_run_when_the_app_allows_their_module(storage, queue):
    app = rdq.App(import_prefixes=["json"])
    app.queue(queue, max_attempts=1)
    client = rdq.Client(storage, app)
    ok = await client.submit("json:dumps", {"a": 1}, queue=queue)
    missing = await client.submit("json:no_such_function", None, queue=queue)
    async with running(fast_worker(app, storage)):
        await wait_status(storage, ok.id, Status.SUCCEEDED)
        t = await wait_status(storage, missing.id, Status.DEAD)
    assert t.attempts[0].error_type == "rdq.HandlerImportError"
    assert "no_such_function" in (t.attempts[0].error_message or "")


async def test_a_handler_module_that_fails_to_import_is_retried_not_remembered(
    storage, queue, tmp_path, monkeypatch
):
    """An import-time error in an allowed handler module is a retryable failure with its
    traceback, logged; the next attempt imports the module again and runs the task."""
    module = f"flaky_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "import pathlib\n"
        "marker = pathlib.Path(__file__).with_name('imported-once')\n"
        "if not marker.exists():\n"
        "    marker.write_text('x')\n"
        "    raise ConnectionError('config service unreachable at import time')\n"
        "def job(payload):\n"
        "    return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    app = rdq.App(import_prefixes=[module])
    app.queue(queue, max_attempts=3, backoff=rdq.Backoff.fixed(0.05))
    log = Recorder()
    sub = await rdq.Client(storage, app).submit(f"{module}:job", queue=queue)
    async with running(fast_worker(app, storage, logger=log)):
        task = await wait_status(storage, sub.id, Status.SUCCEEDED)
    failed, succeeded = task.attempts
    assert (failed.outcome, failed.error_type) == (Outcome.FAILED, "rdq.HandlerImportError")
    assert "config service unreachable at import time" in (failed.error_message or "")
    assert failed.traceback is not None
    assert "raise ConnectionError('config service unreachable at import time')" in (
        failed.traceback
    )
    assert succeeded.outcome == Outcome.SUCCEEDED
    [line] = log.events("could not import the handler")
    assert line["exception"] == failed.traceback


async def test_scheme_invoker_runs_url_handler_refs(storage, queue):
    app = rdq.App()
    app.queue(queue, max_attempts=2, backoff=rdq.Backoff.fixed(0.05))
    calls: list[tuple[str, int]] = []

    async def invoke(task: rdq.spi.Envelope, ctx: rdq.TaskContext) -> None:
        calls.append((task.handler_ref, ctx.attempt))
        if "gone" in task.handler_ref:
            raise rdq.Permanent("HTTP 410 Gone")
        if ctx.attempt == 1:
            raise rdq.RetryAfter(0.1, "HTTP 503")

    app.register_scheme("https", invoke)
    client = rdq.Client(storage, app)
    ok = await client.submit("https://hooks.example.com/ok", {"n": 1}, queue=queue)
    gone = await client.submit("https://hooks.example.com/gone", {"n": 2}, queue=queue)
    async with running(fast_worker(app, storage)):
        t_ok = await wait_status(storage, ok.id, Status.SUCCEEDED)
        t_gone = await wait_status(storage, gone.id, Status.DEAD)
    assert [a.outcome for a in t_ok.attempts] == [Outcome.FAILED, Outcome.SUCCEEDED]
    assert t_gone.attempts[0].outcome == Outcome.PERMANENT


async def test_many_tasks_drain_with_bounded_concurrency(storage, queue):
    app = rdq.App()
    app.queue(queue, concurrency=4)
    running_now = 0
    peak = 0

    @app.handler("work", queue=queue)
    async def work(payload: int) -> None:
        nonlocal running_now, peak
        running_now += 1
        peak = max(peak, running_now)
        await asyncio.sleep(0.01)
        running_now -= 1

    client = rdq.Client(storage, app)
    subs = await client.submit_many([rdq.Submission("work", i) for i in range(60)])
    assert all(s.created for s in subs)
    async with running(fast_worker(app, storage)):
        for sub in subs:
            await wait_status(storage, sub.id, Status.SUCCEEDED)
    assert 1 <= peak <= 4


async def test_handlers_without_a_queue_run_from_the_default_queue(storage):
    app = rdq.App()
    ran = asyncio.Event()

    @app.handler("anywhere")
    async def anywhere(payload: object) -> None:
        ran.set()

    assert app.queues == ["default"]
    sub = await rdq.Client(storage, app).submit("anywhere", id=f"d-{uuid.uuid4().hex}")
    assert sub.queue == "default"
    async with running(fast_worker(app, storage)):
        await wait_status(storage, sub.id, Status.SUCCEEDED)
    assert ran.is_set()


async def test_a_plain_function_returning_an_awaitable_is_awaited(storage, queue):
    app = rdq.App()
    app.queue(queue, max_attempts=1)

    async def really_async(payload: object) -> None:
        raise LookupError("raised by the awaitable")

    app.register("wrapped", lambda payload: really_async(payload), queue=queue)
    sub = await rdq.Client(storage, app).submit("wrapped")
    async with running(fast_worker(app, storage)):
        task = await wait_status(storage, sub.id, Status.DEAD)
    assert task.attempts[0].error_type == "LookupError"


@pytest.mark.looptime
async def test_async_handler_that_swallows_cancellation_is_fenced_off():
    """Its attempt is recorded as a timeout, and its slot goes to the next task once the
    handler has ignored its cancellation for ``FENCE_AFTER`` seconds, not when it gives in."""
    app = rdq.App()
    app.queue("q", max_attempts=1, timeout=0.3, concurrency=1)
    swallowed = asyncio.Event()
    gave_in = asyncio.Event()

    @app.handler("stubborn", queue="q")
    async def stubborn(payload: object) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            swallowed.set()
            await asyncio.sleep(20)  # ignores its timeout's cancellation for a long while
            gave_in.set()

    @app.handler("quick", queue="q")
    async def quick(payload: object) -> None:
        return None

    async with virtual_store() as storage:
        client = rdq.Client(storage, app)
        a = await client.submit("stubborn")
        b = await client.submit("quick", delay=0.1)
        async with worker(app, storage, grace_period=0.5):
            # the only slot is freed although the stubborn coroutine still runs
            tb = await settle(storage, b.id, Status.SUCCEEDED)
            assert swallowed.is_set() and not gave_in.is_set()
        ta = await storage.get(a.id)
    assert [(x.outcome, x.error_type) for x in ta.attempts] == [(Outcome.TIMEOUT, "rdq.Timeout")]
    (timed_out,), (ran,) = ta.attempts, tb.attempts
    assert timed_out.started_at is not None and ran.started_at is not None
    fenced = (ran.started_at - timed_out.started_at).total_seconds()
    assert 0.3 + FENCE_AFTER <= fenced <= 0.3 + FENCE_AFTER + MAX_TICK + POLL, fenced


async def test_handlers_take_nothing_the_payload_or_payload_and_context(storage, queue):
    app = rdq.App()
    app.queue(queue, max_attempts=1)
    seen: list[object] = []

    @app.handler("nothing", queue=queue)
    def nothing() -> None:
        seen.append("nothing")

    @app.handler("payload_only", queue=queue)
    async def payload_only(payload: object) -> None:
        seen.append(payload)

    @app.handler("with_context", queue=queue)
    async def with_context(payload: object, ctx: rdq.TaskContext) -> None:
        seen.append((payload, ctx.attempt, ctx.headers, ctx.queue, ctx.handler_ref))

    client = rdq.Client(storage, app)
    subs = [
        await client.submit("nothing"),
        await client.submit("payload_only", [1, 2]),
        await client.submit("with_context", {"k": "v"}, headers={"h": "1"}),
    ]
    async with running(fast_worker(app, storage)):
        for sub in subs:
            await wait_status(storage, sub.id, Status.SUCCEEDED)
    assert sorted(map(repr, seen)) == sorted(
        map(repr, ["nothing", [1, 2], ({"k": "v"}, 1, {"h": "1"}, queue, "with_context")])
    )


async def test_long_handlers_do_not_keep_free_slots_idle(storage, queue):
    """Three of four slots hold long handlers: the last free slot still takes new work,
    although fewer than half the slots are free."""
    app = rdq.App()
    app.queue(queue, concurrency=4, timeout=120)
    release = asyncio.Event()
    started: list[int] = []

    @app.handler("job", queue=queue)
    async def job(payload: int) -> None:
        started.append(payload)
        if payload < 3:
            await asyncio.wait_for(release.wait(), 90)

    client = rdq.Client(storage, app)
    long_ones = [await client.submit("job", i, queue=queue) for i in range(3)]
    async with running(fast_worker(app, storage)):
        await eventually(lambda: _true(len(started) == 3))
        quick = await client.submit("job", 3, queue=queue)
        await wait_status(storage, quick.id, Status.SUCCEEDED)
        for sub in long_ones:
            assert (await storage.get(sub.id)).status == Status.IN_FLIGHT
        release.set()
        for sub in long_ones:
            await wait_status(storage, sub.id, Status.SUCCEEDED)


async def _true(value: bool) -> bool:
    return value


@pytest.mark.parametrize(
    "attr",
    [
        "os.system",  # through a module the handler module imported
        "run",  # a function it merely imported (from subprocess import run)
        "_private",  # a private name
        "Jobs.__init__.__globals__",  # dunder walk out of a class
    ],
)
async def test_import_path_refs_cannot_escape_the_allowed_modules(
    storage, queue, tmp_path, monkeypatch, attr
):
    """A producer who may submit any handler_ref must not reach code outside the modules the
    app allows: the ref is refused at run time (UnknownHandler) and nothing is called."""
    module = f"jobs_{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "called"
    (tmp_path / f"{module}.py").write_text(
        "import os\n"
        "from subprocess import run\n"
        f"MARKER = {str(marker)!r}\n"
        "def _private(payload):\n"
        "    open(MARKER, 'w').close()\n"
        "class Jobs:\n"
        "    def __init__(self):\n"
        "        pass\n"
        "def ok(payload):\n"
        "    return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    app = rdq.App(import_prefixes=[module])
    app.queue(queue, max_attempts=1)
    client = rdq.Client(storage, app)
    control = await client.submit(f"{module}:ok", None, queue=queue)
    evil = await client.submit(f"{module}:{attr}", f"touch {marker}", queue=queue)
    async with running(fast_worker(app, storage)):
        await wait_status(storage, control.id, Status.SUCCEEDED)
        task = await wait_status(storage, evil.id, Status.DEAD)
    assert task.attempts[-1].error_type == "rdq.UnknownHandler"
    assert not marker.exists()
