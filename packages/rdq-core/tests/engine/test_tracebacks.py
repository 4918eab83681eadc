"""Each failed attempt carries the formatted traceback of its failure: the handler's frames (not
the engine's), chained causes, bounded in size with the innermost frames kept; a timeout
records where the handler was; every text of an attempt fits the contract's limits. The
async timeouts run on simulated time (``_virtual.py``): their timeout and fence cost no real
time."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import rdq
from rdq.spi import Envelope, Outcome, Status, bounds

from ._virtual import settle, virtual_store, worker
from .conftest import Recorder, fast_worker, running, wait_status

pytestmark = pytest.mark.asyncio


def lookup(table: dict[str, int], key: str) -> int:
    return table[key]


async def run_one(storage: Any, app: rdq.App, handler: str, **kwargs: Any) -> Any:
    """Submit one task, run a worker until it is DEAD; return the task and the log."""
    log = Recorder()
    sub = await rdq.Client(storage, app).submit(handler, **kwargs)
    async with running(fast_worker(app, storage, logger=log)):
        task = await wait_status(storage, sub.id, Status.DEAD)
    return task, log


async def run_virtual(app: rdq.App, handler: str) -> Envelope:
    """``run_one`` on simulated time, on the memory store: a timeout, and the fence of a
    handler that ignores it, cost no real time."""
    async with virtual_store() as storage:
        sub = await rdq.Client(storage, app).submit(handler)
        async with worker(app, storage):
            return await settle(storage, sub.id, Status.DEAD)


def one_attempt_app(queue: str, **config: Any) -> rdq.App:
    app = rdq.App()
    app.queue(queue, max_attempts=1, **config)
    return app


async def test_a_failure_records_the_handlers_traceback_and_logs_it(storage, queue):
    app = one_attempt_app(queue)

    @app.handler("charge", queue=queue)
    async def charge(payload: dict[str, str]) -> None:
        lookup({}, payload["customer"])

    task, log = await run_one(storage, app, "charge", payload={"customer": "missing"})
    attempt = task.attempts[-1]
    assert (attempt.error_type, attempt.error_message) == ("KeyError", "'missing'")
    trace = attempt.traceback
    assert trace is not None
    assert trace.startswith("Traceback (most recent call last):")
    assert 'lookup({}, payload["customer"])' in trace  # the handler's line
    assert "return table[key]" in trace  # the innermost frame
    assert trace.rstrip().endswith("KeyError: 'missing'")
    assert "_invoke.py" not in trace and "_runner.py" not in trace  # not the engine's
    [line] = log.events("dead-lettered")
    assert line["exception"] == trace


async def test_chained_causes_are_kept(storage, queue):
    app = one_attempt_app(queue)

    class GatewayDown(Exception):
        pass

    @app.handler("pay", queue=queue)
    def pay(payload: object) -> None:  # a plain function: its traceback crosses a thread
        try:
            {}["gateway"]
        except KeyError as exc:
            raise GatewayDown("payment gateway unreachable") from exc

    task, _ = await run_one(storage, app, "pay")
    trace = task.attempts[-1].traceback
    assert trace is not None
    assert "KeyError: 'gateway'" in trace
    assert "The above exception was the direct cause of the following exception" in trace
    assert trace.rstrip().endswith("GatewayDown: payment gateway unreachable")
    assert "_threads.py" not in trace and "asyncio" not in trace


async def test_a_huge_traceback_is_cut_from_the_outside_in(storage, queue):
    """A failure 400 frames deep, caused by another 400 frames deep, with long lines: the
    record fits MAX_TRACEBACK_LENGTH and keeps the innermost frames and both exceptions."""
    app = one_attempt_app(queue)

    def deep(n: int, message: str) -> None:
        if n == 0:
            raise ValueError(message)
        deep(n - 1, message)  # a long line padded with a comment: ......................

    @app.handler("deep", queue=queue)
    async def handler(payload: object) -> None:
        try:
            deep(400, "the root cause")
        except ValueError as exc:
            raise RuntimeError("x" * 20_000) from exc

    task, _ = await run_one(storage, app, "deep")
    attempt = task.attempts[-1]
    trace = attempt.traceback
    assert trace is not None
    assert len(trace) <= bounds.MAX_TRACEBACK_LENGTH
    assert "ValueError: the root cause" in trace  # the cause is kept
    assert "raise ValueError(message)" in trace  # its innermost frame too
    assert "direct cause" in trace
    assert attempt.error_message is not None
    assert len(attempt.error_message) <= bounds.MAX_ERROR_MESSAGE_LENGTH


async def test_error_types_and_messages_fit_the_contract(storage, queue):
    app = one_attempt_app(queue)
    long_type = type("E" * 3000, (Exception,), {})

    @app.handler("odd", queue=queue)
    async def odd(payload: object) -> None:
        raise long_type("m" * 100_000)

    task, _ = await run_one(storage, app, "odd")
    attempt = task.attempts[-1]
    assert attempt.outcome == Outcome.FAILED
    assert attempt.error_type is not None and attempt.error_message is not None
    assert len(attempt.error_type) <= bounds.MAX_ERROR_TYPE_LENGTH
    assert len(attempt.error_message) <= bounds.MAX_ERROR_MESSAGE_LENGTH
    assert attempt.error_type.startswith(f"{__name__}.EEEE")
    bounds.check_attempt(attempt)


@pytest.mark.looptime
async def test_an_async_timeout_records_where_the_handler_was_waiting():
    app = one_attempt_app("q", timeout=0.3)

    async def fetch_report() -> None:
        await asyncio.sleep(30)  # the slow call

    @app.handler("report", queue="q")
    async def report(payload: object) -> None:
        await fetch_report()

    task = await run_virtual(app, "report")
    attempt = task.attempts[-1]
    assert (attempt.outcome, attempt.error_type) == (Outcome.TIMEOUT, "rdq.Timeout")
    trace = attempt.traceback
    assert trace is not None
    assert "await fetch_report()" in trace
    assert "await asyncio.sleep(30)  # the slow call" in trace
    assert trace.rstrip().endswith("rdq.Timeout: handler exceeded its timeout of 0.3s")


async def test_a_thread_timeout_records_where_the_function_was(storage, queue):
    app = one_attempt_app(queue, timeout=0.3)
    release = threading.Event()

    def slow_query() -> None:
        release.wait(30)  # the slow call

    @app.handler("report", queue=queue)
    def report(payload: object) -> None:
        slow_query()

    try:
        task, _ = await run_one(storage, app, "report")
    finally:
        release.set()
    trace = task.attempts[-1].traceback
    assert trace is not None
    assert "slow_query()" in trace
    assert "release.wait(30)  # the slow call" in trace
    assert "_threads.py" not in trace


@pytest.mark.looptime
async def test_a_handler_that_swallows_its_cancellation_is_recorded_where_it_hid():
    app = one_attempt_app("q", timeout=0.2)

    done = asyncio.Event()

    async def stubborn() -> None:
        while not done.is_set():  # swallows every cancellation until the test is over
            try:
                await done.wait()  # keeps going
            except asyncio.CancelledError:
                continue

    @app.handler("stubborn", queue="q")
    async def handler(payload: object) -> None:
        await stubborn()

    try:
        task = await run_virtual(app, "stubborn")
    finally:
        done.set()
    attempt = task.attempts[-1]
    assert attempt.outcome == Outcome.TIMEOUT
    assert attempt.traceback is not None
    assert "await done.wait()  # keeps going" in attempt.traceback


async def test_successes_carry_no_traceback(storage, queue):
    app = rdq.App()
    app.queue(queue)

    @app.handler("ok", queue=queue)
    async def ok(payload: object) -> None:
        return None

    sub = await rdq.Client(storage, app).submit("ok")
    async with running(fast_worker(app, storage)):
        task = await wait_status(storage, sub.id, Status.SUCCEEDED)
    assert task.attempts[-1].traceback is None
