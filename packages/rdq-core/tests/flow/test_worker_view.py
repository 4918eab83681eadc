"""A worker's view of a breaker is a refresh behind the store's: a probe the store lets
through to it while it still sees the breaker open is run, and its outcome is the probe's."""

from __future__ import annotations

from datetime import timedelta

import pytest
import structlog

import rdq
from rdq import flow
from rdq.retry import SUCCESS
from rdq.spi import Control
from rdq.worker._clock import StorageClock
from rdq.worker._flow import FlowControl
from rdq.worker._run import Run
from rdq_memory import MemoryStorage

pytestmark = pytest.mark.asyncio

KEY = "handler:call"


def app() -> rdq.App:
    app = rdq.App()
    app.queue("q")

    @app.handler("call", queue="q")
    async def call(payload: object) -> None:
        return None

    return app


async def opened(storage: MemoryStorage) -> Control:
    now = await storage.now()
    control = flow.trip(
        Control(queue="q", key=KEY),
        now,
        rdq.Breaker(cooldown=0),
        started=now,
        error_types=["ConnectionRefusedError"],
        error_type="ConnectionRefusedError",
        error_message="refused",
        sample_task=None,
    )
    return await storage.put_control(control, expected_version=0)


async def probing(storage: MemoryStorage, control: Control) -> None:
    """Another worker's transition: half-open, three probes."""
    half = flow.begin_probing(control, await storage.now(), rdq.Breaker(cooldown=0))
    assert half is not None
    await storage.put_control(half, expected_version=control.version)


async def test_a_probe_let_through_to_a_worker_that_still_sees_the_breaker_open_runs() -> None:
    async with MemoryStorage() as storage:
        await rdq.Client(storage, app()).submit("call", {})
        worker_flow = FlowControl(
            app(), storage, StorageClock(), ["q"], "w1", structlog.get_logger()
        )
        control = await opened(storage)
        await worker_flow.refresh()  # this worker sees it open
        await probing(storage, control)
        (claimed,) = await storage.claim_due("q", 1, timedelta(seconds=30), worker_id="w1")
        assert worker_flow.breaker("q", KEY).state is flow.State.OPEN, "its view is behind"
        assert await worker_flow.hold(claimed.task) is None, "the store let it through: a probe"
        await worker_flow.record(Run(claimed, 30.0, 0.0), SUCCESS)
        (after,) = await storage.list_controls("q")
    assert flow.breaker_of(after).state is flow.State.CLOSED, "the probe's success closed it"


async def test_a_task_claimed_before_its_breaker_opened_is_held_unrun() -> None:
    async with MemoryStorage() as storage:
        await rdq.Client(storage, app()).submit("call", {})
        (claimed,) = await storage.claim_due("q", 1, timedelta(seconds=30), worker_id="w1")
        worker_flow = FlowControl(
            app(), storage, StorageClock(), ["q"], "w1", structlog.get_logger()
        )
        await opened(storage)
        await worker_flow.refresh()
        assert await worker_flow.hold(claimed.task) is not None
