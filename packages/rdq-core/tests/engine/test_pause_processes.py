"""A pause, honoured by a fleet of four ``rdq worker`` processes on PostgreSQL: once the
workers have had one refresh of the controls to see it, no task of the paused queue starts on
any of them; a restart of every worker keeps it; a resume lets the work go on, and no task has
used up an attempt for the pause."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import rdq
from rdq.admin import TaskAdmin
from rdq.spi import AuditFilter, Outcome, Page, Status, Storage, TaskFilter
from rdq.worker._flow import REFRESH

pytestmark = pytest.mark.asyncio

RDQ = str(Path(sys.executable).parent / "rdq")
WORKERS = 4
TASKS = 600

APP = textwrap.dedent(
    """
    import asyncio, os
    import rdq

    QUEUE = os.environ["PAUSE_QUEUE"]
    app = rdq.App()
    app.queue(QUEUE, concurrency=10)

    @app.handler("work", queue=QUEUE)
    async def work(payload):
        await asyncio.sleep(0.2)
    """
)


class Fleet:
    """``WORKERS`` ``rdq worker`` processes of the app, started and stopped together."""

    def __init__(self, app_dir: Path, url: str, queue: str) -> None:
        self.app_dir, self.url, self.queue = app_dir, url, queue
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        self.procs = [
            subprocess.Popen(
                [RDQ, "worker", "pauseapp:app", "--storage", self.url],
                cwd=self.app_dir,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={**os.environ, "PAUSE_QUEUE": self.queue},
            )
            for _ in range(WORKERS)
        ]

    async def stop(self) -> None:
        """SIGTERM to each; wait until every one has exited."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            await asyncio.to_thread(proc.wait, 60)

    async def registered(self, storage: Storage) -> None:
        """Until every process of the fleet has registered in the store (its claim loop is
        running: it registers as it starts)."""
        pids = [f":{proc.pid}:" for proc in self.procs]
        for _ in range(600):
            ids = [worker.id for worker in await storage.list_workers()]
            if all(any(pid in i for i in ids) for pid in pids):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"not every worker registered: {ids}")

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)


@pytest.fixture
def fleet(tmp_path: Path, postgres_url: str, queue: str) -> Iterator[Fleet]:
    (tmp_path / "pauseapp.py").write_text(APP)
    fleet = Fleet(tmp_path, postgres_url, queue)
    yield fleet
    fleet.kill()


async def attempts_started(storage: Storage, queue: str) -> list[datetime]:
    """When each attempt that ran a handler started (store time), over every task."""
    starts = []
    for status in (Status.PENDING, Status.SUCCEEDED):
        cursor = None
        while True:
            page, cursor = await storage.list_tasks(
                queue,
                TaskFilter(status=status),
                Page(limit=1000, cursor=cursor, include_attempts=True),
            )
            starts += [
                a.started_at
                for t in page
                for a in t.attempts
                if a.outcome is not Outcome.DEFERRED and a.started_at is not None
            ]
            if cursor is None:
                break
    return starts


async def succeeded(storage: Storage, queue: str) -> int:
    return (await storage.stats(queue)).succeeded


async def test_a_pause_holds_every_worker_through_a_restart_and_a_resume_lets_them_go_on(
    postgres_url: str, queue: str, fleet: Fleet
) -> None:
    async with rdq.open_storage(postgres_url) as storage:
        await storage.migrate()
        await rdq.Client(storage).submit_many(
            [rdq.Submission("work", {"n": i}, queue=queue) for i in range(TASKS)]
        )
        fleet.start()
        for _ in range(600):  # the fleet is busy
            if await succeeded(storage, queue) >= 100:
                break
            await asyncio.sleep(0.1)
        admin = TaskAdmin(storage)
        paused = await admin.pause(queue, actor="oncall", reason="dependency maintenance")
        assert paused.updated_at is not None
        seen_by_all = paused.updated_at + timedelta(seconds=REFRESH + 0.5)
        await asyncio.sleep(REFRESH + 3.0)
        held_at = await succeeded(storage, queue)
        assert held_at < TASKS, "the pause came too late to hold anything"

        await fleet.stop()
        fleet.start()  # every worker again, the queue still paused
        await fleet.registered(storage)
        await asyncio.sleep(REFRESH + 1.0)  # each has read the controls and polled since
        assert await succeeded(storage, queue) == held_at, "a task ran while paused"
        late = [s for s in await attempts_started(storage, queue) if s > seen_by_all]
        assert late == [], f"{len(late)} attempts started after every worker saw the pause"

        await admin.resume(queue, actor="oncall", reason="maintenance over")
        for _ in range(1200):
            if await succeeded(storage, queue) == TASKS:
                break
            await asyncio.sleep(0.1)
        stats = await storage.stats(queue)
        tasks, _ = await storage.list_tasks(
            queue, TaskFilter(status=Status.SUCCEEDED), Page(limit=TASKS, include_attempts=True)
        )
        audit, _ = await storage.list_audit(AuditFilter(queue=queue), Page(limit=100))
    actions = [entry.action for entry in audit]
    assert stats.succeeded == TASKS and stats.dlq_depth == 0
    charged = [
        t.id for t in tasks if sum(a.outcome is not Outcome.DEFERRED for a in t.attempts) > 1
    ]
    assert charged == [], f"{len(charged)} tasks ran more than once"
    assert "pause" in actions and "resume" in actions
