"""Worker processes on a shared store (Postgres): a SIGKILLed worker's task is recovered by
another; SIGTERM records INTERRUPTED and leaves the task due."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import rdq
import rdq.spi
from rdq.spi import Outcome, Status

from .conftest import fast_worker, running, wait_status

RDQ = str(Path(sys.executable).parent / "rdq")

APP = textwrap.dedent(
    """
    import os, pathlib, time
    import rdq

    QUEUE = os.environ["DEMO_QUEUE"]
    app = rdq.App()
    app.queue(QUEUE, lease=1.0, timeout=120, max_attempts=3)

    @app.handler("slow", queue=QUEUE)
    def slow(payload):
        pathlib.Path(payload["marker"]).write_text(str(os.getpid()))
        time.sleep(120)
    """
)


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "procapp.py").write_text(APP)
    return tmp_path


def start_worker(app_dir: Path, url: str, queue: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [RDQ, "worker", "procapp:app", "--storage", url, "--log-format", "json", *extra],
        cwd=app_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "DEMO_QUEUE": queue},
    )


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


async def wait_for_file(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(os.path.exists, path):
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"worker exited early ({proc.returncode}): {out}")
        if time.monotonic() > deadline:
            pytest.fail("the worker never started the handler")
        await asyncio.sleep(0.05)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_worker_killed_mid_task_is_recovered_by_another(postgres_url, app_dir, queue, procs):
    marker = app_dir / "started"
    async with rdq.open_storage(postgres_url) as storage:
        await storage.migrate()
        sub = await rdq.Client(storage).submit("slow", {"marker": str(marker)}, queue=queue)
        proc = start_worker(app_dir, postgres_url, queue)
        procs.append(proc)
        await wait_for_file(marker, proc)
        await outlived_its_first_lease(storage, sub.id)  # kept by the worker's heartbeat
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

        rescuer = rdq.App()
        rescuer.queue(queue, lease=1.0, max_attempts=3)

        @rescuer.handler("slow", queue=queue)
        def slow(payload: object) -> None:
            return None

        async with running(fast_worker(rescuer, storage)):
            task = await wait_status(storage, sub.id, Status.SUCCEEDED, timeout=60)
    assert [a.outcome for a in task.attempts] == [Outcome.LEASE_EXPIRED, Outcome.SUCCEEDED]
    lapsed = task.attempts[0].worker_id  # names the killed worker: host:pid:random
    assert lapsed is not None and lapsed.split(":")[1] == str(proc.pid)


async def outlived_its_first_lease(storage: rdq.spi.Storage, task_id: str) -> None:
    """Wait, by the storage clock, until the task's first lease would have expired; it must
    still be IN_FLIGHT with no attempt recorded, its lease renewed past that point."""
    first = (await storage.get(task_id)).lease_expires_at
    assert first is not None
    deadline = time.monotonic() + 60
    while await storage.now() <= first:
        if time.monotonic() > deadline:
            pytest.fail("the storage clock never passed the first lease's end")
        await asyncio.sleep(0.05)
    task = await storage.get(task_id)
    assert task.status == Status.IN_FLIGHT and task.attempts == []
    assert task.lease_expires_at is not None and task.lease_expires_at > first


@pytest.mark.slow
@pytest.mark.asyncio
async def test_sigterm_records_interrupted_and_leaves_the_task_due(
    postgres_url, app_dir, queue, procs
):
    marker = app_dir / "started"
    async with rdq.open_storage(postgres_url) as storage:
        await storage.migrate()
        sub = await rdq.Client(storage).submit("slow", {"marker": str(marker)}, queue=queue)
        proc = start_worker(app_dir, postgres_url, queue, "--grace-period", "0.5")
        procs.append(proc)
        await wait_for_file(marker, proc)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert "interrupting tasks still running after the grace period" in out
        task = await storage.get(sub.id)
    assert task.status == Status.PENDING
    assert [(a.outcome, a.error_type) for a in task.attempts] == [
        (Outcome.INTERRUPTED, "rdq.Interrupted")
    ]
    assert task.attempts[0].worker_id is not None
    assert task.attempts[0].worker_id.split(":")[1] == str(proc.pid)
