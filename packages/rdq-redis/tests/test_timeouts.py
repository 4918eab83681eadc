"""The operation timeout (URL option ``timeout``): a frozen Redis (SIGSTOP) is an outage,
not a hang. Every operation raises ``StorageUnavailable`` after about ``timeout`` seconds;
``wait_due``'s own wait is exempt; once the server runs again, so does the store."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from rdq import open_storage
from rdq.errors import ConfigError, StorageUnavailable
from rdq.spi import Envelope, Page, Selector, Status, TaskFilter, bounds
from rdq_compliance.servers import ServerUnavailable, in_ci
from rdq_compliance.servers.redis import RedisServer
from rdq_redis._url import parse_url

TIMEOUT = 1.0
OUTER = bounds.DEFAULT_OPERATION_TIMEOUT
"""How long a test lets one call on a frozen server run: a call still waiting when the
default timeout (10 s) would have fired has ignored the URL's ``timeout``."""


@contextmanager
def own_server() -> Iterator[RedisServer]:
    try:
        server = RedisServer()
    except ServerUnavailable as exc:
        if in_ci():
            pytest.fail(f"no redis-server (CI never skips a backend): {exc}", pytrace=False)
        pytest.skip(str(exc))
    with server:
        yield server


@contextmanager
def frozen(server: RedisServer) -> Iterator[None]:
    """The server stopped (SIGSTOP: it keeps its connections and answers nothing)."""
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.process.pid, signal.SIGCONT)


async def _times_out(call: Awaitable[Any]) -> float:
    """Await ``call``; it must raise StorageUnavailable. Returns how long that took."""
    started = time.monotonic()
    with pytest.raises(StorageUnavailable, match=r"127\.0\.0\.1:\d+ is unreachable"):
        await asyncio.wait_for(call, OUTER)
    return time.monotonic() - started


def test_timeout_defaults_to_the_contract_and_sets_the_socket_timeouts() -> None:
    config = parse_url("redis://h:1/0")
    assert config.timeout == bounds.DEFAULT_OPERATION_TIMEOUT
    assert config.client_options["socket_timeout"] == bounds.DEFAULT_OPERATION_TIMEOUT
    config = parse_url("redis://h:1/0?timeout=2.5&socket_connect_timeout=1")
    assert (config.timeout, config.client_options["socket_timeout"]) == (2.5, 2.5)
    # an explicit socket option wins: it stays in the URL redis-py reads
    assert "socket_connect_timeout" not in config.client_options
    assert "socket_connect_timeout=1" in config.url
    for bad in ("0", "-1", "soon", "inf", "nan"):
        with pytest.raises(ConfigError) as info:
            parse_url(f"redis://h:1/0?timeout={bad}")
        assert info.value.key == "timeout"


@pytest.mark.asyncio
async def test_every_operation_on_a_frozen_server_raises_unavailable_within_the_timeout() -> None:
    queue = "frozen"
    with own_server() as server:
        async with open_storage(f"{server.url}?timeout={TIMEOUT}") as store:
            await store.migrate()
            await store.enqueue(Envelope(id="t-1", queue=queue, handler_ref="h"))
            (claim,) = await store.claim_due(queue, 1, timedelta(minutes=5))
            calls: list[Callable[[], Awaitable[Any]]] = [
                lambda: store.enqueue(Envelope(id="t-2", queue=queue, handler_ref="h")),
                lambda: store.claim_due(queue, 10, timedelta(minutes=5)),
                lambda: store.extend_lease("t-1", claim.token, timedelta(minutes=5)),
                lambda: store.get("t-1"),
                lambda: store.stats(queue),
                lambda: store.list_queues(),
                lambda: store.list_tasks(queue, TaskFilter(status=Status.IN_FLIGHT), Page()),
                lambda: store.dlq_list(queue, None, Page()),
                lambda: store.redrive(queue, Selector.by_ids("t-1")),
                lambda: store.cancel(queue, ["t-1"]),
                lambda: store.now(),
                lambda: store.wait_due(queue, 60.0),
            ]
            with frozen(server):
                took = [await _times_out(call()) for call in calls]
                # A store opened while the server is frozen fails its connect the same way.
                late = open_storage(f"{server.url}?timeout={TIMEOUT}")
                took.append(await _times_out(late.connect()))
            # Each call waited for its timeout (the upper bound is OUTER, above), it did not
            # give up at once; load can only make these longer.
            assert all(t >= TIMEOUT * 0.9 for t in took), took

            # The server runs again: so does the store (the broken connections were dropped).
            assert (await store.stats(queue)).in_flight == 1
            assert (await store.get("t-1")).id == "t-1"
            assert await store.cancel(queue, ["t-1"]) == 1


@pytest.mark.asyncio
async def test_wait_due_waits_longer_than_the_operation_timeout() -> None:
    with own_server() as server:
        async with open_storage(f"{server.url}?timeout={TIMEOUT}") as store:
            await store.migrate()
            loop = asyncio.get_running_loop()
            started = loop.time()
            # Nothing is due and nothing happens: it times out, and never before its timeout
            # (the contract), which is twice the operation timeout that does not apply to it.
            assert await store.wait_due("idle", 2 * TIMEOUT) is False
            assert loop.time() - started >= 2 * TIMEOUT


@pytest.mark.asyncio
async def test_a_send_the_frozen_server_never_reads_raises_unavailable_within_the_timeout() -> None:
    # Twenty tasks of 900 kB in one batch: more than the socket buffers of a loopback
    # connection hold, so the send itself waits on the stopped server, not only the reply.
    queue = "frozen-send"
    tasks = [
        Envelope(id=f"big-{i}", queue=queue, handler_ref="h", payload={"blob": "x" * 900_000})
        for i in range(20)
    ]
    with own_server() as server:
        async with open_storage(f"{server.url}?timeout={TIMEOUT}") as store:
            await store.migrate()
            with frozen(server):
                took = await _times_out(store.enqueue_batch(tasks))
            assert took >= TIMEOUT * 0.9, took
            # The store works again once the server does. What the timed-out call sent may
            # still be applied (the server reads it when it runs again): enqueueing the batch
            # again stores each task once.
            await store.enqueue_batch(tasks)
            assert (await store.stats(queue)).pending == len(tasks)
