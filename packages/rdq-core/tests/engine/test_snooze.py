"""rdq.Snooze on simulated time: "not yet" reschedules a task for the delay asked without
using up an attempt or touching its breaker, a queue bounds how often, and an HTTP error
with a Retry-After snoozes when the queue says so."""

from __future__ import annotations

import httpx
import pytest

import rdq
from rdq import flow, retry
from rdq.spi import Outcome, Status

from ._virtual import gaps, settle, virtual_store, worker

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


def not_ready_until(ready_at: int) -> tuple[rdq.App, list[int]]:
    """An app whose handler snoozes for 30 s until its ``ready_at``-th call."""
    app = rdq.App()
    app.queue("exports", max_attempts=2)
    calls: list[int] = []

    @app.handler("export", queue="exports")
    async def export(payload: object, ctx: rdq.TaskContext) -> None:
        calls.append(ctx.attempt)
        if len(calls) == 1:
            raise rdq.Snooze(30, "the report is still being built")
        if len(calls) < ready_at:
            ctx.snooze(30)

    return app, calls


async def test_a_snooze_runs_the_task_again_after_its_delay_and_uses_up_no_attempt() -> None:
    app, _ = not_ready_until(ready_at=4)
    async with virtual_store() as storage, worker(app, storage):
        sub = await rdq.Client(storage, app).submit("export", {})
        task = await settle(storage, sub.id, Status.SUCCEEDED)
        controls = await storage.list_controls("exports")
    outcomes = [a.outcome for a in task.attempts]
    assert outcomes == [Outcome.SNOOZED] * 3 + [Outcome.SUCCEEDED]
    assert task.attempts[0].error_type == retry.SNOOZE
    assert task.attempts[0].error_message == "the report is still being built"
    assert all(30.0 <= gap <= 30.0 + 0.2 for gap in gaps(task)), gaps(task)
    assert retry.attempts_used(task, task.attempt_count) == 1, "max_attempts=2 was never near"
    assert not [c for c in controls if flow.breaker_of(c).outages], "no breaker was fed"


async def test_a_task_that_snoozes_past_max_snoozes_goes_to_the_dlq_saying_so() -> None:
    app = rdq.App()
    app.queue("exports", max_snoozes=3)

    @app.handler("export", queue="exports")
    async def export(payload: object) -> None:
        raise rdq.Snooze(10)

    async with virtual_store() as storage, worker(app, storage):
        sub = await rdq.Client(storage, app).submit("export", {})
        task = await settle(storage, sub.id, Status.DEAD)
    assert [a.outcome for a in task.attempts] == [Outcome.SNOOZED] * 4
    assert task.attempts[-1].error_type == retry.SNOOZED_TOO_OFTEN
    assert "more than max_snoozes (3)" in (task.attempts[-1].error_message or "")


def rate_limited(snooze: bool) -> rdq.App:
    app = rdq.App()
    app.queue("api", max_attempts=2, snooze_retry_after=snooze)
    calls: list[int] = []

    @app.handler("call", queue="api")
    async def call(payload: object) -> None:
        calls.append(1)
        if len(calls) <= 3:
            request = httpx.Request("POST", "https://api.example.com/v1/things")
            response = httpx.Response(429, headers={"Retry-After": "20"}, request=request)
            response.raise_for_status()

    return app


async def test_a_queue_can_snooze_on_a_retry_after_instead_of_failing() -> None:
    async with virtual_store() as storage, worker(rate_limited(snooze=True), storage):
        app = rate_limited(snooze=True)
        sub = await rdq.Client(storage, app).submit("call", {})
        task = await settle(storage, sub.id, Status.SUCCEEDED)
    assert [a.outcome for a in task.attempts] == [Outcome.SNOOZED] * 3 + [Outcome.SUCCEEDED]
    assert task.attempts[0].error_type == "httpx.HTTPStatusError"
    assert all(20.0 <= gap <= 20.0 + 0.2 for gap in gaps(task)), gaps(task)


async def test_without_it_a_429_is_an_outage_class_failure_that_waits_its_retry_after() -> None:
    """The default: the 429 is a failure that feeds the breaker (here, a quiet queue's task
    using up its attempts trips it) and the retry waits for its Retry-After."""
    app = rate_limited(snooze=False)
    async with virtual_store() as storage, worker(app, storage):
        sub = await rdq.Client(storage, app).submit("call", {})
        task = await settle(storage, sub.id, Status.SUCCEEDED)
        (control,) = await storage.list_controls("api")
    outcomes = [a.outcome for a in task.attempts]
    assert outcomes[:2] == [Outcome.FAILED, Outcome.DEFERRED], "failed, then held by the breaker"
    assert Outcome.SNOOZED not in outcomes
    assert task.attempts[1].error_type == "httpx.HTTPStatusError"
    assert gaps(task)[0] >= 20.0, "the Retry-After is honoured"
    assert flow.breaker_of(control).outages, "the breaker was fed"
    assert retry.attempts_used(task, task.attempt_count, flow.breaker_of(control).outages) == 1


@pytest.mark.parametrize("delay", [-1, float("nan")])
async def test_a_snooze_must_not_go_back_in_time(delay: float) -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        rdq.Snooze(delay)


async def test_max_snoozes_is_checked_as_a_queue_setting() -> None:
    app = rdq.App()
    with pytest.raises(rdq.ConfigError, match="max_snoozes"):
        app.queue("q", max_snoozes=-1)
    _, queues = rdq.config.parse_config(
        {"queues": {"q": {"max_snoozes": 5, "snooze_retry_after": True}}}
    )
    assert queues["q"].max_snoozes == 5 and queues["q"].snooze_retry_after is True
