"""The operation timeout (URL option ``timeout``): a frozen server (SIGSTOP) is an outage, not
a hang. Every operation raises ``StorageUnavailable`` after about ``timeout`` seconds;
``wait_due``'s own wait and ``migrate`` are exempt; once the server runs again, so does the
store."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rdq import open_storage
from rdq.errors import StorageUnavailable
from rdq.spi import (
    Attempt,
    AuditEntry,
    Completion,
    Envelope,
    Outcome,
    Page,
    Selector,
    Status,
    TaskFilter,
    bounds,
)
from rdq_compliance.servers.mongo import SecantusProcess

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("secantus") is None,
    reason="freezing a server needs a SecantusDB process of the test's own",
)

TIMEOUT = 1.0
OUTER = 30.0
"""How long a test waits for the server to stop or come back before it fails."""
CALL_BOUND = bounds.DEFAULT_OPERATION_TIMEOUT
"""How long a test lets one call on a frozen server run: a call still waiting when the
default timeout (10 s) would have fired has ignored the URL's ``timeout``."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SecantusProcess]:
    process = SecantusProcess(tmp_path / "data")
    process.data_dir.mkdir()
    process.start()
    try:
        yield process
    finally:
        process.stop()


@contextmanager
def frozen(server: SecantusProcess) -> Iterator[None]:
    """The server stopped (SIGSTOP: it keeps its connections and answers nothing), once the
    kernel reports every one of its threads stopped."""
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        _until_stopped(pid)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _until_stopped(pid: int) -> None:
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return  # no procfs: SIGSTOP takes effect at once for a process that is not running
    deadline = time.monotonic() + OUTER
    while time.monotonic() < deadline:
        states = []
        for stat in tasks.glob("*/stat"):
            try:
                states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                continue
        if states and all(state in "tT" for state in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"the server (pid {pid}) did not stop within {OUTER}s")


async def _times_out(call: Awaitable[Any], what: str) -> float:
    """Await ``call``; it must raise StorageUnavailable naming the server. Returns how long
    that took."""
    started = time.monotonic()
    try:
        result = await asyncio.wait_for(call, CALL_BOUND)
    except StorageUnavailable as exc:
        message = str(exc)
    else:
        pytest.fail(f"{what} on a frozen server returned {result!r}")
    assert "127.0.0.1:" in message, f"{what}: {message}"
    return time.monotonic() - started


def _task(task_id: str) -> Envelope:
    return Envelope(id=task_id, queue="q", handler_ref="app:handler")


@pytest.mark.asyncio
async def test_every_operation_on_a_frozen_server_raises_unavailable_within_the_timeout(
    server: SecantusProcess,
) -> None:
    url = server.url.replace("/?", "/frozen?") + f"&timeout={TIMEOUT}"
    async with open_storage(url) as store:
        await store.migrate()
        await store.enqueue(_task("t-1"))
        (claim,) = await store.claim_due("q", 1, timedelta(minutes=5))
        done = Attempt(number=1, outcome=Outcome.SUCCEEDED)
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "enqueue": lambda: store.enqueue(_task("t-2")),
            "enqueue_batch": lambda: store.enqueue_batch([_task("t-3"), _task("t-4")]),
            "claim_due": lambda: store.claim_due("q", 10, timedelta(minutes=5)),
            "extend_lease": lambda: store.extend_lease("t-1", claim.token, timedelta(minutes=5)),
            "complete": lambda: store.complete("t-1", claim.token, done),
            "complete_many": lambda: store.complete_many([Completion("t-1", claim.token, done)]),
            "get": lambda: store.get("t-1"),
            "stats": lambda: store.stats("q"),
            "list_queues": lambda: store.list_queues(),
            "list_tasks": lambda: store.list_tasks(
                "q", TaskFilter(status=Status.IN_FLIGHT), Page()
            ),
            "dlq_list": lambda: store.dlq_list("q", None, Page()),
            "dlq_groups": lambda: store.dlq_groups("q"),
            "redrive": lambda: store.redrive("q", Selector.by_ids("t-1")),
            "cancel": lambda: store.cancel("q", ["t-1"]),
            "append_audit": lambda: store.append_audit(
                AuditEntry(actor="ops", action="x", queue="q")
            ),
            "now": lambda: store.now(),
            "wait_due": lambda: store.wait_due("q", 60.0),
        }
        with frozen(server):
            took = [await _times_out(call(), name) for name, call in calls.items()]
            # A store opened while the server is frozen fails its connect the same way.
            late = open_storage(url)
            took.append(await _times_out(late.connect(), "connect"))
            # Closing never hangs either.
            await asyncio.wait_for(late.aclose(), CALL_BOUND)
        # Each call gave up within CALL_BOUND (above), having waited for its timeout: at least
        # one of the first (server selection may give up early once the monitor saw the
        # server go silent). Load can only make these longer.
        assert sum(t >= 0.8 * TIMEOUT for t in took[:3]) >= 1, took

        # The server runs again: so does the store.
        stats = await _eventually(lambda: store.stats("q"))
        assert stats.in_flight == 1
        assert (await store.get("t-1")).status == Status.IN_FLIGHT
        assert await store.cancel("q", ["t-1"]) == 1


async def _eventually(call: Callable[[], Awaitable[Any]]) -> Any:
    deadline = time.monotonic() + OUTER
    while True:
        try:
            return await call()
        except StorageUnavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


@pytest.mark.asyncio
async def test_wait_due_waits_longer_than_the_operation_timeout(server: SecantusProcess) -> None:
    url = server.url.replace("/?", "/idle?") + f"&timeout={TIMEOUT}"
    async with open_storage(url) as store:
        await store.migrate()
        loop = asyncio.get_running_loop()
        started = loop.time()
        # Nothing is due and nothing happens: it times out, and never before its timeout (the
        # contract), which is twice the operation timeout that does not apply to it.
        assert await store.wait_due("idle", 2 * TIMEOUT) is False
        assert loop.time() - started >= 2 * TIMEOUT
