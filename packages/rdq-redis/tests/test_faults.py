"""Faults a real Redis produces: wrong credentials, no server, a restart while workers run,
and a memory limit. Each test runs a redis-server of its own."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar

import pytest
import redis.asyncio as aioredis

from rdq import open_storage
from rdq.errors import NotFound, StaleClaim, StorageUnavailable
from rdq.spi import Attempt, Envelope, Outcome, Status, Storage
from rdq_compliance.servers import ServerUnavailable, in_ci
from rdq_compliance.servers.redis import RedisServer, free_port

T = TypeVar("T")
PATIENCE = 60.0


def new_task(queue: str, task_id: str | None = None, **fields: Any) -> Envelope:
    fields.setdefault("handler_ref", "tests.handlers:noop")
    return Envelope(id=task_id or f"t-{uuid.uuid4().hex}", queue=queue, **fields)


async def eventually(
    probe: Callable[[], Awaitable[T | None]], what: str, patience: float = PATIENCE
) -> T:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while True:
        result = await probe()
        if result is not None:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"gave up after {patience:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


@contextmanager
def own_server(*args: str) -> Iterator[RedisServer]:
    """A redis-server of this test's own, started with ``args``."""
    try:
        server = RedisServer(args)
    except ServerUnavailable as exc:
        if in_ci():
            pytest.fail(f"no redis-server (CI never skips a backend): {exc}", pytrace=False)
        pytest.skip(str(exc))
    with server:
        yield server


@pytest.mark.asyncio
async def test_wrong_password_is_one_clear_error_naming_the_server() -> None:
    with own_server("--requirepass", "s3cret") as server:
        address = f"127.0.0.1:{server.port}"
        store = open_storage(f"redis://:wrong@{address}/0")
        with pytest.raises(StorageUnavailable, match=f"{address}.*credentials"):
            await store.connect()
        async with open_storage(f"redis://:s3cret@{address}/0") as good:
            assert await good.enqueue(new_task("q")) is True


@pytest.mark.asyncio
async def test_unreachable_server_is_one_clear_error_naming_the_server() -> None:
    address = f"127.0.0.1:{free_port()}"
    store = open_storage(f"redis://{address}/0", socket_connect_timeout=2)
    with pytest.raises(StorageUnavailable, match=f"{address}.*unreachable"):
        await store.connect()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_restart_while_workers_run_gives_retryable_errors_then_recovers() -> None:
    queue, count = "restart", 120
    lease = timedelta(seconds=2)
    with own_server("--appendonly", "yes", "--appendfsync", "always") as server:
        async with open_storage(server.url) as store:
            await store.enqueue_batch([new_task(queue) for _ in range(count)])
        unavailable = 0
        stop = asyncio.Event()

        async def work() -> None:
            nonlocal unavailable
            async with open_storage(server.url) as worker:
                while not stop.is_set():
                    try:
                        claimed = await worker.claim_due(queue, 4, lease)
                        for claim in claimed:
                            await asyncio.sleep(0.02)  # the "handler"
                            done = Attempt(
                                number=claim.task.attempt_count + 1, outcome=Outcome.SUCCEEDED
                            )
                            await worker.complete(claim.task.id, claim.token, done)
                        if not claimed:
                            await asyncio.sleep(0.05)
                    except StorageUnavailable:
                        unavailable += 1
                        await asyncio.sleep(0.1)
                    except StaleClaim:
                        pass  # a claim whose completion was cut off by the restart

        async def succeeded(at_least: int) -> int | None:
            try:
                async with open_storage(server.url) as probe:
                    n = (await probe.stats(queue)).succeeded
            except StorageUnavailable:
                return None
            return n if n >= at_least else None

        workers = [asyncio.create_task(work()) for _ in range(3)]
        try:
            await eventually(lambda: succeeded(10), "the workers to make progress")
            server.kill()

            async def errors_seen() -> bool | None:
                return True if unavailable >= 3 else None

            await eventually(errors_seen, "the workers to see the outage")
            server.start()
            assert await eventually(lambda: succeeded(count), "every task to succeed") == count
        finally:
            stop.set()
            await asyncio.gather(*workers)  # a worker that died of another error fails here
        assert unavailable >= 3


@pytest.mark.asyncio
async def test_maxmemory_noeviction_refuses_enqueue_clearly_and_writes_nothing() -> None:
    with own_server("--maxmemory-policy", "noeviction") as server:
        raw = aioredis.Redis.from_url(server.url)
        try:
            used = int((await raw.info("memory"))["used_memory"])
            await raw.config_set("maxmemory", str(used + 2 * 1024 * 1024))
            async with open_storage(server.url) as store:
                await store.enqueue(new_task("claimed"))
                (claim,) = await store.claim_due("claimed", 1, timedelta(minutes=5))
                stored = await _fill_until_refused(store, raw)
                assert 2 <= len(stored) < 200

                # Well over the limit now: even a batch of small tasks is refused whole.
                used = int((await raw.info("memory"))["used_memory"])
                await raw.config_set("maxmemory", str(used // 2))
                batch = [new_task("q") for _ in range(3)]
                with pytest.raises(StorageUnavailable, match="out of memory"):
                    await store.enqueue_batch(batch)
                for task in batch:
                    with pytest.raises(NotFound):
                        await store.get(task.id)
                assert await raw.keys(f"*{batch[0].id}*") == []

                assert (await store.stats("q")).pending == len(stored)
                for task_id in stored:
                    assert (await store.get(task_id)).payload is not None

                # A resolution is refused whole too: the claim stays intact...
                done = Attempt(number=1, outcome=Outcome.SUCCEEDED)
                with pytest.raises(StorageUnavailable, match="out of memory"):
                    await store.complete(claim.task.id, claim.token, done)
                held = await store.get(claim.task.id)
                assert (held.status, held.attempts) == (Status.IN_FLIGHT, [])

                await raw.config_set("maxmemory", "0")
                assert await store.enqueue(batch[0]) is True
                # ...and completes once memory is available again.
                await store.complete(claim.task.id, claim.token, done)
                assert (await store.get(claim.task.id)).status is Status.SUCCEEDED
        finally:
            await raw.aclose()


async def _fill_until_refused(store: Storage, raw: aioredis.Redis) -> list[str]:
    """Enqueue 100 kB tasks until Redis refuses one; check the refused one left no trace."""
    stored: list[str] = []
    refused: StorageUnavailable | None = None
    task = new_task("q")
    for _ in range(200):
        task = new_task("q", payload="x" * 100_000)
        try:
            await store.enqueue(task)
        except StorageUnavailable as exc:
            refused = exc
            break
        stored.append(task.id)
    assert refused is not None, "Redis never refused a write under maxmemory"
    assert "out of memory" in str(refused)
    with pytest.raises(NotFound):
        await store.get(task.id)
    assert await raw.keys(f"*{task.id}*") == []
    return stored


@pytest.mark.asyncio
async def test_migrate_is_quiet_under_noeviction(caplog: pytest.LogCaptureFixture) -> None:
    with own_server("--maxmemory-policy", "noeviction") as server:
        async with open_storage(server.url) as store:
            with caplog.at_level("WARNING", logger="rdq_redis"):
                await store.migrate()
    assert "maxmemory-policy" not in caplog.text
