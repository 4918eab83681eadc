"""A limit across ``rdq worker`` processes on PostgreSQL: a worker ``kill -9``'d while it
holds all ten slots of a limit keeps them from every other worker while its leases live, and
they come back within one lease of its death — to the worker beside it, which then holds
ten, never more."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import rdq
from rdq.spi import Page, Status, Storage, TaskFilter

RDQ = str(Path(sys.executable).parent / "rdq")
LEASE = 2.0

APP = textwrap.dedent(
    f"""
    import asyncio, os
    import rdq

    QUEUE = os.environ["DEMO_QUEUE"]
    app = rdq.App()
    app.queue(QUEUE, lease={LEASE}, timeout=600, concurrency=20,
              limits=[rdq.Concurrency(10, key="psp")])

    @app.handler("hold", queue=QUEUE)
    async def hold(payload):
        await asyncio.sleep(600)
    """
)


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "limitapp.py").write_text(APP)
    return tmp_path


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def start_worker(app_dir: Path, url: str, queue: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [RDQ, "worker", "limitapp:app", "--storage", url, "--log-format", "json"],
        cwd=app_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "DEMO_QUEUE": queue},
    )


async def holders(storage: Storage, queue: str) -> Counter[int]:
    """IN_FLIGHT tasks with a live lease, by the pid of the worker holding them."""
    now = await storage.now()
    tasks, _ = await storage.list_tasks(
        queue, TaskFilter(status=Status.IN_FLIGHT), Page(limit=1000)
    )
    return Counter(
        int((t.claimed_by or "::").split(":")[1] or 0)
        for t in tasks
        if t.lease_expires_at is not None and t.lease_expires_at > now
    )


async def until(check: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        await asyncio.sleep(0.1)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_killed_workers_slots_come_back_within_one_lease(
    postgres_url: str, app_dir: Path, queue: str, procs: list[subprocess.Popen[str]]
) -> None:
    async with rdq.open_storage(postgres_url) as storage:
        await storage.migrate()
        app = rdq.App()
        app.queue(queue, limits=[rdq.Concurrency(10, key="psp")])
        app.register("hold", lambda: None, queue=queue)
        await rdq.Client(storage, app).submit_many([rdq.Submission("hold", i) for i in range(30)])
        first = start_worker(app_dir, postgres_url, queue)
        procs.append(first)

        async def first_holds_ten() -> bool:
            return (await holders(storage, queue)) == Counter({first.pid: 10})

        await until(first_holds_ten, "the first worker holding the ten slots")
        second = start_worker(app_dir, postgres_url, queue)
        procs.append(second)

        async def registered() -> bool:
            return any(f":{second.pid}:" in w.id for w in await storage.list_workers())

        await until(registered, "the second worker claiming")
        await asyncio.sleep(2 * LEASE)  # the first one renews its leases: nothing for the other
        assert await holders(storage, queue) == Counter({first.pid: 10})
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        killed = time.monotonic()

        async def second_holds_ten() -> bool:
            return (await holders(storage, queue)) == Counter({second.pid: 10})

        await until(second_holds_ten, "the slots back with the second worker", 30.0)
        back = time.monotonic() - killed
        await asyncio.sleep(1.0)
        assert await holders(storage, queue) == Counter({second.pid: 10}), "ten, never more"
        (control,) = [c for c in await storage.list_controls(queue) if c.key == "limit:psp"]
        assert control.in_use == 10
    # lease 2 s, renewed every third: a slot is free at most one lease after the kill; the
    # second worker claims within its poll (at most 2 s) and a round trip after that
    assert back < LEASE + 2.0 + 1.0, f"the slots came back {back:.1f}s after the kill"
