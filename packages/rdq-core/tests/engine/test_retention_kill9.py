"""A DEAD task past ``dead_ttl`` is in the archive before it leaves the store, whenever the
worker doing the retention is killed: a worker process is SIGKILLed right after its archive
said the batch is durable (before the store deleted it), or in the middle of writing the batch;
the tasks are still in the store, and the next round archives them again and removes them —
archived at least once, never lost. On SQLite (a file) and PostgreSQL."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

import rdq
from rdq.retention import DirectoryArchive, Expiry, Problem, read_tasks, retain
from rdq.spi import Attempt, Envelope, Outcome, Status, Storage

WORKER = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    import rdq
    from rdq.retention import DirectoryArchive

    url, queue, directory, when = sys.argv[1:5]

    class KilledArchive(DirectoryArchive):
        '''Dies right after the batch is durable, or halfway through writing it.'''

        def _append(self, queue, lines):
            if when == "mid-write":
                import gzip
                data = gzip.compress(lines, mtime=0)
                current = self._file_for(queue, len(data))
                with open(current.path, "ab") as f:
                    f.write(data[: len(data) // 2])
                    f.flush()
                    os.fsync(f.fileno())
                os.kill(os.getpid(), signal.SIGKILL)
            where = super()._append(queue, lines)
            os.kill(os.getpid(), signal.SIGKILL)
            return where

    async def main():
        app = rdq.App(archive=KilledArchive(directory))
        app.queue(queue, dead_ttl=0.05)
        async with rdq.open_storage(url) as storage:
            worker = rdq.Worker(app, storage, queues=[queue], purge_interval=0.05,
                                stats_interval=0.05, grace_period=0.1)
            await asyncio.wait_for(worker.run(), 60)

    asyncio.run(main())
    """
)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/kill9.db"
    return str(request.getfixturevalue("postgres_url"))


async def _dead(storage: Storage, queue: str, count: int) -> list[str]:
    ids = [f"k9-{uuid.uuid4().hex[:10]}" for _ in range(count)]
    for task_id in ids:
        await storage.enqueue(
            Envelope(id=task_id, queue=queue, handler_ref="h", payload={"i": task_id})
        )
    claimed = await storage.claim_due(queue, count, rdq.spi.bounds.MAX_LEASE)
    for claim in claimed:
        attempt = Attempt(
            number=1, outcome=Outcome.PERMANENT, error_type="Boom", error_message="no"
        )
        await storage.dead_letter(claim.task.id, claim.token, attempt)
    return ids


@pytest.mark.parametrize("when", ["after-archive", "mid-write"])
@pytest.mark.asyncio
async def test_a_worker_killed_during_retention_loses_no_dead_task(
    url: str, when: str, tmp_path: Path
) -> None:
    queue = f"k9-{uuid.uuid4().hex[:8]}"
    directory = tmp_path / "archive"
    async with rdq.open_storage(url) as storage:
        await storage.migrate()
        ids = await _dead(storage, queue, 5)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(script), url, queue, str(directory), when],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]

    problems: list[Problem] = []
    first = [t.id for t in read_tasks(directory, problems)]
    async with rdq.open_storage(url) as storage:
        still = [i for i in ids if await _present(storage, i)]
        assert still == ids, "killed before the deletion: every task is still in the store"
        if when == "after-archive":
            assert sorted(first) == sorted(ids), "the batch was durable before the kill"
            assert problems == []
        else:
            assert first == [] and len(problems) == 1 and "cut short" in problems[0].error

        now = await storage.now()
        done = await retain(
            storage,
            DirectoryArchive(directory),
            queue,
            [Expiry(Status.DEAD, now, "dead_ttl 0.05s")],
            runner="the-next-worker",
            now=now + timedelta(minutes=10),  # past the killed worker's hold on the record
        )
        assert done is not None and done.count == 5
        assert [i for i in ids if await _present(storage, i)] == []
    archived = [t for t in read_tasks(directory, []) if t.queue == queue]
    counts = {i: sum(t.id == i for t in archived) for i in ids}
    assert all(n >= 1 for n in counts.values()), counts
    assert all(t.status == Status.DEAD and t.attempts for t in archived)
    if when == "after-archive":
        assert all(n == 2 for n in counts.values()), "archived again by the next round"


async def _present(storage: Storage, task_id: str) -> bool:
    try:
        await storage.get(task_id)
    except rdq.NotFound:
        return False
    return True
