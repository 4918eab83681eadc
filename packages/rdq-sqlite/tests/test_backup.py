"""``rdq backup --to PATH``: a checked copy of a live database, taken while two ``rdq worker``
processes and a producer keep committing, holds every task acknowledged before it began."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rdq.errors import NotFound, ValidationError
from rdq.spi import Envelope, Page, Status, TaskFilter
from rdq_sqlite import SqliteStorage
from rdq_sqlite._migrate import LATEST

RDQ = str(Path(sys.executable).parent / "rdq")

APP = textwrap.dedent(
    """
    import asyncio, sys
    import rdq

    app = rdq.App()
    app.queue("jobs", lease=30.0, max_attempts=3, concurrency=4)

    @app.handler("work", queue="jobs")
    async def work(payload, ctx):
        await asyncio.sleep(0.005)

    async def produce(url):
        # prints each id once submit returned: the task is acknowledged
        async with rdq.Client.open(url, app=app) as client:
            n = 0
            while True:
                await client.submit("work", {"n": n, "pad": "x" * 200}, id=f"job-{n}")
                print("acked", f"job-{n}", flush=True)
                n += 1

    if __name__ == "__main__":
        asyncio.run(produce(sys.argv[1]))
    """
)

SEED = 8000
"""Tasks stored before the writers start (about 20 MB), so the copy takes a while to write."""


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("RDQ_STORAGE", "RDQ_STORAGE_URL")}


async def seed(url: str) -> None:
    async with SqliteStorage.from_url(url) as store:
        await store.migrate()
        for start in range(0, SEED, 500):
            await store.enqueue_batch(
                [
                    Envelope(id=f"seed-{n}", queue="seed", handler_ref="m:f", payload="p" * 2000)
                    for n in range(start, start + 500)
                ]
            )


async def succeeded_ids(url: str, queue: str) -> set[str]:
    """Every SUCCEEDED task of ``queue`` now (each one's completion was committed)."""
    found: set[str] = set()
    async with SqliteStorage.from_url(url) as store:
        cursor = None
        while True:
            tasks, cursor = await store.list_tasks(
                queue, TaskFilter(status=Status.SUCCEEDED), Page(limit=500, cursor=cursor)
            )
            found.update(task.id for task in tasks)
            if cursor is None:
                return found


async def rdq(*args: str, cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        RDQ,
        *args,
        cwd=cwd,
        env=env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_backup_under_sustained_writes_holds_every_task_acknowledged_before_it(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'rdq.db'}"
    (tmp_path / "jobs_app.py").write_text(APP)
    await seed(url)
    workers = [
        await asyncio.create_subprocess_exec(
            RDQ, "worker", "jobs_app:app", "--storage", url, "--log-level", "WARNING",
            cwd=tmp_path, env=env(), stderr=asyncio.subprocess.DEVNULL,
        )
        for _ in range(2)
    ]  # fmt: skip
    producer = await asyncio.create_subprocess_exec(
        sys.executable, "jobs_app.py", url, cwd=tmp_path, env=env(), stdout=asyncio.subprocess.PIPE
    )
    assert producer.stdout is not None
    acked: list[str] = []

    async def read_acks() -> None:
        assert producer.stdout is not None
        while line := await producer.stdout.readline():
            acked.append(line.split()[1].decode())

    reader = asyncio.create_task(read_acks())
    try:
        deadline = time.monotonic() + 60
        while len(acked) < 300 or len(await succeeded_ids(url, "jobs")) < 100:
            assert time.monotonic() < deadline, "the workers and the producer did not get going"
            await asyncio.sleep(0.1)
        # everything acknowledged up to here was committed before the backup began
        acked_before = list(acked)
        succeeded_before = await succeeded_ids(url, "jobs")
        code, out, err = await rdq("backup", "--storage", url, "--to", "copy.db", cwd=tmp_path)
        acked_meanwhile = len(acked) - len(acked_before)
        assert code == 0, err
        assert all(w.returncode is None for w in workers), "a worker stopped during the backup"
        assert producer.returncode is None, "the producer stopped during the backup"
    finally:
        for process in (*workers, producer):
            if process.returncode is None:
                process.terminate()
        for process in (*workers, producer):
            await process.wait()
        reader.cancel()

    assert acked_meanwhile > 0  # the producer kept committing while the command ran
    copy = tmp_path / "copy.db"
    check = sqlite3.connect(copy)
    try:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        in_copy = check.execute("SELECT count(*) FROM task").fetchone()[0]
    finally:
        check.close()
    assert f"backed up {in_copy:,} task(s) to {copy}" in out
    assert "checked: integrity_check: ok" in out
    async with SqliteStorage.from_url(f"sqlite:///{copy}") as backup:
        assert (await backup.stats("seed")).pending == SEED
        missing = []
        for task_id in acked_before:
            try:
                await backup.get(task_id)
            except NotFound:
                missing.append(task_id)
        assert not missing, f"{len(missing)} acknowledged task(s) are not in the backup"
        for task_id in succeeded_before:
            assert (await backup.get(task_id)).status == Status.SUCCEEDED


@pytest.mark.asyncio
async def test_an_existing_target_is_refused_and_kept_unless_force(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rdq.db'}"
    async with SqliteStorage.from_url(url) as store:
        await store.enqueue(Envelope(id="kept", queue="q", handler_ref="m:f"))
    target = tmp_path / "copy.db"
    target.write_bytes(b"an older backup")

    code, _, err = await rdq("backup", "--storage", url, "--to", "copy.db", cwd=tmp_path)
    assert code == 1
    assert f"target: {target} already exists" in err
    assert "--force" in err
    assert target.read_bytes() == b"an older backup"
    assert not (tmp_path / "copy.db.partial").exists()

    code, out, err = await rdq(
        "backup", "--storage", url, "--to", "copy.db", "--force", cwd=tmp_path
    )
    assert code == 0, err
    assert f"backed up 1 task(s) to {target}" in out
    async with SqliteStorage.from_url(f"sqlite:///{target}") as backup:
        assert (await backup.get("kept")).status == Status.PENDING


@pytest.mark.asyncio
async def test_the_database_itself_is_refused_as_a_target_even_with_force(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'rdq.db'}"
    async with SqliteStorage.from_url(url) as store:
        await store.enqueue(Envelope(id="kept", queue="q", handler_ref="m:f"))
    for name in ("rdq.db", "rdq.db-wal"):
        code, _, err = await rdq("backup", "--storage", url, "--to", name, "--force", cwd=tmp_path)
        assert code == 1
        assert "is the database itself" in err
    async with SqliteStorage.from_url(url) as store:
        assert (await store.get("kept")).status == Status.PENDING


@pytest.mark.asyncio
async def test_json_reports_the_copy_counts_and_checks(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rdq.db'}"
    async with SqliteStorage.from_url(url) as store:
        await store.enqueue_batch(
            [Envelope(id=f"t{n}", queue="q", handler_ref="m:f") for n in range(3)]
        )
        await store.cancel("q", ["t0"])
    code, out, err = await rdq(
        "backup", "--storage", url, "--to", "copy.db", "--json", cwd=tmp_path
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["target"] == str(tmp_path / "copy.db")
    assert report["tasks"] == 3
    assert report["by_status"] == {"PENDING": 2, "CANCELLED": 1}
    assert report["checks"] == ["integrity_check: ok", f"schema version: {LATEST}"]
    assert report["size"] == (tmp_path / "copy.db").stat().st_size


@pytest.mark.asyncio
async def test_an_in_memory_database_backs_up_through_the_api(tmp_path: Path) -> None:
    async with SqliteStorage.from_url("sqlite:///:memory:") as store:
        await store.migrate()
        await store.enqueue(Envelope(id="only", queue="q", handler_ref="m:f"))
        result = await store.backup(str(tmp_path / "copy.db"))
    assert result.tasks == {"PENDING": 1}
    async with SqliteStorage.from_url(f"sqlite:///{tmp_path / 'copy.db'}") as backup:
        assert (await backup.get("only")).id == "only"


@pytest.mark.asyncio
async def test_a_store_without_backup_is_refused_naming_the_capability(tmp_path: Path) -> None:
    code, _, err = await rdq("backup", "--storage", "memory://", "--to", "x.db", cwd=tmp_path)
    assert code == 1
    assert "does not offer the 'backup' capability" in err
    assert not (tmp_path / "x.db").exists()


@pytest.mark.asyncio
async def test_a_target_in_a_missing_directory_is_refused_naming_the_field(
    store: SqliteStorage, tmp_path: Path
) -> None:
    with pytest.raises(ValidationError) as info:
        await store.backup(str(tmp_path / "nowhere" / "copy.db"))
    assert info.value.field == "target"
    assert "does not exist" in info.value.message
