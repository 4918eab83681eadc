"""A queue's claim order from its config: fair shares among tenants (``fair``) and priority
aging (``priority_aging``), written to the store by the workers that serve the queue."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

import rdq
from rdq.errors import ConfigError, Unsupported
from rdq.spi import QUEUE_KEY, Capabilities, Storage
from rdq_memory import MemoryStorage

from .conftest import eventually, fast_worker, running


def _needs(storage: Storage, flag: str) -> None:
    if not getattr(storage.capabilities(), flag):
        pytest.skip(f"the store lacks {flag}")


async def _queue_control(storage: Storage, queue: str) -> rdq.spi.Control | None:
    return {c.key: c for c in await storage.list_controls(queue)}.get(QUEUE_KEY)


@pytest.mark.asyncio
async def test_a_small_tenant_starts_within_the_first_claims_behind_a_big_backlog(
    storage: Storage, queue: str
) -> None:
    _needs(storage, "fair_shares")
    app = rdq.App()
    app.queue(queue, fair="tenant:", concurrency=4)
    started: list[str] = []

    @app.handler("work", queue=queue)
    async def work(payload: dict[str, str]) -> None:
        started.append(payload["tenant"])
        await asyncio.sleep(0.01)

    client = rdq.Client(storage, app)
    await client.submit_many(
        [rdq.Submission(work, {"tenant": "big"}, keys=["tenant:big"]) for _ in range(120)]
    )
    await client.submit_many(
        [rdq.Submission(work, {"tenant": "small"}, keys=["tenant:small"]) for _ in range(4)]
    )

    async def twelve_started() -> bool:
        return len(started) >= 12

    async with running(fast_worker(app, storage, queues=[queue])):
        await eventually(twelve_started, "the first twelve tasks to start", 60)
    assert started[:8].count("small") == 4, (
        f"the small tenant's 4 tasks start among the first 8, not behind the 120: {started[:12]}"
    )
    control = await _queue_control(storage, queue)
    assert control is not None and control.fair == "tenant:"


@pytest.mark.asyncio
async def test_priority_aging_from_the_config_reaches_the_store_and_off_removes_it(
    storage: Storage, queue: str
) -> None:
    _needs(storage, "priority_aging")
    app = rdq.App()
    app.queue(queue, priority_aging=30)
    app.register("noop", lambda: None, queue=queue)
    async with running(fast_worker(app, storage, queues=[queue])):
        await eventually(
            lambda: _aging_is(storage, queue, 30.0), "the aging to reach the store", 30
        )
    undeclared = rdq.App()
    undeclared.register("noop", lambda: None, queue=queue)
    async with running(fast_worker(undeclared, storage, queues=[queue])):
        await asyncio.sleep(0.2)
    assert await _aging_is(storage, queue, 30.0), "a config that declares nothing leaves it"
    off = rdq.App()
    off.queue(queue, priority_aging=0)
    off.register("noop", lambda: None, queue=queue)
    async with running(fast_worker(off, storage, queues=[queue])):
        await eventually(lambda: _aging_is(storage, queue, None), "the aging to be removed", 30)


async def _aging_is(storage: Storage, queue: str, aging: float | None) -> bool:
    control = await _queue_control(storage, queue)
    return (control.aging if control is not None else None) == aging


class _Strict(MemoryStorage):
    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(super().capabilities(), fair_shares=False)


@pytest.mark.asyncio
async def test_a_worker_refuses_a_fair_queue_on_a_store_that_cannot_share_it() -> None:
    app = rdq.App()
    app.queue("imports", fair="tenant:")
    app.register("noop", lambda: None, queue="imports")
    async with _Strict() as store:
        with pytest.raises(Unsupported) as caught:
            await fast_worker(app, store, queues=["imports"]).run()
        assert "fair_shares" in str(caught.value)
        assert await store.list_controls("imports") == []


def test_fair_and_priority_aging_come_from_the_toml_config_and_bad_values_are_named() -> None:
    app = rdq.App()
    app.configure({"queues": {"imports": {"fair": "tenant:", "priority_aging": 45}}})
    config = app.queue_config("imports")
    assert (config.fair, config.priority_aging, config.claim_order) == (
        "tenant:",
        45.0,
        ("tenant:", 45.0),
    )
    assert app.queue_config("other").claim_order is None
    for table, key in (
        ({"fair": "has space"}, "queues.imports.fair"),
        ({"fair": 3}, "queues.imports.fair"),
        ({"priority_aging": -1}, "queues.imports.priority_aging"),
        ({"priority_aging": "soon"}, "queues.imports.priority_aging"),
    ):
        with pytest.raises(ConfigError) as caught:
            rdq.App().configure({"queues": {"imports": table}})
        assert caught.value.key == key
