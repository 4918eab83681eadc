"""Rate limits across workers, on simulated time: no window of the period sees more than the
rate and its burst, the rate is used, and a handler's ``RetryAfter`` halves an adaptive rate
until its delay has passed, then the declared rate is back."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

import rdq
from rdq import flow
from rdq.spi import Storage

from ._virtual import until, virtual_store, worker

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


def busiest(starts: list[float], window: float) -> int:
    """The most starts in any window of ``window`` seconds."""
    ordered = sorted(starts)
    best, first = 0, 0
    for last, t in enumerate(ordered):
        while ordered[first] <= t - window:
            first += 1
        best = max(best, last - first + 1)
    return best


async def drained(storage: Storage, total: int) -> float:
    async def done() -> bool:
        return (await storage.stats("q")).succeeded == total

    return await until(done, 0.1)


async def test_a_rate_limit_holds_over_every_window_across_workers_and_is_used() -> None:
    app = rdq.App()
    app.queue("q", concurrency=10, limits=[rdq.Rate(10, per=1.0, burst=2, key="api")])
    starts: list[float] = []

    @app.handler("call", queue="q")
    async def call(payload: object) -> None:
        starts.append(asyncio.get_running_loop().time())
        await asyncio.sleep(0.01)

    async with virtual_store() as storage:
        await rdq.Client(storage, app).submit_many([rdq.Submission("call", i) for i in range(200)])
        async with AsyncExitStack() as stack:
            for _ in range(3):
                await stack.enter_async_context(worker(app, storage))
            await drained(storage, 200)
    span = max(starts) - min(starts)
    assert busiest(starts, 1.0) <= 12, f"{busiest(starts, 1.0)} starts in one second"
    assert 200 / span >= 9.0, f"the limit is used: {200 / span:.1f}/s of 10/s"


async def test_a_retry_after_halves_an_adaptive_rate_until_its_delay_has_passed() -> None:
    app = rdq.App()
    app.queue("q", concurrency=10, limits=[rdq.Rate(20, per=1.0, burst=2, key="api")])
    starts: list[float] = []
    throttled = {"left": 0}

    @app.handler("call", queue="q")
    async def call(payload: object) -> None:
        starts.append(asyncio.get_running_loop().time())
        if throttled["left"] > 0:
            throttled["left"] -= 1
            raise rdq.RetryAfter(10.0, "429 Too Many Requests")
        await asyncio.sleep(0.01)

    async with virtual_store() as storage:
        await rdq.Client(storage, app).submit_many([rdq.Submission("call", i) for i in range(800)])

        async def rate() -> int | None:
            found = {c.key: c for c in await storage.list_controls("q")}.get("limit:api")
            return found.rate if found is not None else None

        async with AsyncExitStack() as stack:
            for _ in range(2):
                await stack.enter_async_context(worker(app, storage))
            loop = asyncio.get_running_loop()
            await asyncio.sleep(3.0)
            throttled["left"] = 1
            lowered_at = await until(lambda: _is(rate(), 10))
            lowered = {c.key: c for c in await storage.list_controls("q")}["limit:api"]
            assert flow.lowered_of(lowered) is not None
            await asyncio.sleep(4.0)
            window = [t for t in starts if lowered_at + 1.0 <= t < lowered_at + 4.0]
            assert busiest(window, 1.0) <= 10 + 2, f"{busiest(window, 1.0)}/s while halved"
            assert len(window) >= 3 * 8, f"the halved rate is used: {len(window)} in 3 s"
            restored_at = await until(lambda: _is(rate(), 20))
            assert 9.0 <= restored_at - lowered_at <= 12.0, "back once the delay has passed"
            await asyncio.sleep(4.0)
            after = [t for t in starts if restored_at + 1.0 <= t < restored_at + 4.0]
            assert len(after) >= 3 * 17, f"the declared rate again: {len(after)} in 3 s"
            assert loop.time() - lowered_at < 60


async def _is(value: object, expected: object) -> bool:
    return bool(await value == expected)  # type: ignore[misc]
