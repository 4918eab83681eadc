"""Retention: a queue's ``dead_ttl`` (and ``archive_succeeded``) remove finished tasks only
once they are in the archive; the archive's files; the retention record; the audit entry."""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import rdq
from rdq.retention import (
    DirectoryArchive,
    Expiry,
    Problem,
    archive_from,
    read_record,
    read_tasks,
    retain,
)
from rdq.spi import AuditFilter, Envelope, Page, Status, Storage

from .conftest import eventually, fast_worker, running, wait_status


def _app(queue: str, archive: object, **settings: object) -> rdq.App:
    app = rdq.App(archive=archive)  # type: ignore[arg-type]
    app.queue(queue, max_attempts=1, **settings)  # type: ignore[arg-type]

    @app.handler("ok", queue=queue)
    async def ok(payload: object) -> None:
        return None

    @app.handler("bad", queue=queue)
    async def bad(payload: object) -> None:
        raise rdq.Permanent("it will never work")

    return app


async def _gone(storage: Storage, task_id: str) -> bool:
    try:
        await storage.get(task_id)
    except rdq.NotFound:
        return True
    return False


def test_the_directory_archive_appends_one_gzip_member_per_batch_and_reads_them_back(
    tmp_path: Path,
) -> None:
    import asyncio

    archive = DirectoryArchive(tmp_path)
    first = [Envelope(id=f"a{i}", queue="q:1", handler_ref="h", payload={"n": i}) for i in range(3)]
    second = [Envelope(id="b", queue="q:1", handler_ref="h", payload=[1, 2])]
    where = asyncio.run(archive.write(first))
    assert asyncio.run(archive.write(second)) == where, "one file per writer and day"
    path = Path(where)
    assert path.name.endswith(".jsonl.gz") and path.parent.parent.name == "q_1"
    assert [t.id for t in read_tasks(tmp_path)] == ["a0", "a1", "a2", "b"]
    lines = gzip.decompress(path.read_bytes()).splitlines()  # an ordinary gzip file
    assert len(lines) == 4


def test_a_file_cut_short_in_its_last_batch_gives_every_whole_batch_and_says_so(
    tmp_path: Path,
) -> None:
    import asyncio

    archive = DirectoryArchive(tmp_path)
    kept = [Envelope(id="kept", queue="q", handler_ref="h")]
    where = Path(asyncio.run(archive.write(kept)))
    asyncio.run(archive.write([Envelope(id="cut", queue="q", handler_ref="h", payload="x" * 500)]))
    data = where.read_bytes()
    where.write_bytes(data[: len(data) - 30])  # a writer killed in the middle of its batch
    problems: list[Problem] = []
    assert [t.id for t in read_tasks(where, problems)] == ["kept"]
    assert len(problems) == 1 and "cut short" in problems[0].error


def test_the_archive_rotates_past_its_size(tmp_path: Path) -> None:
    import asyncio

    archive = DirectoryArchive(tmp_path, max_file_bytes=1024, compress=False)
    for i in range(5):
        asyncio.run(
            archive.write([Envelope(id=f"t{i}", queue="q", handler_ref="h", payload="x" * 400)])
        )
    files = sorted(tmp_path.rglob("*.jsonl"))
    assert len(files) >= 3
    assert sorted(t.id for t in read_tasks(tmp_path)) == [f"t{i}" for i in range(5)]


def test_an_archive_is_named_by_a_directory_or_a_sink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(archive_from(tmp_path), DirectoryArchive)
    monkeypatch.setenv("RDQ_ARCHIVE", str(tmp_path / "env"))
    found = archive_from(None)
    assert isinstance(found, DirectoryArchive) and found.directory == tmp_path / "env"
    with pytest.raises(rdq.ConfigError) as bad:
        archive_from("nowhere_such_module:sink")
    assert bad.value.key == "archive.sink"


@pytest.mark.asyncio
async def test_a_dead_task_past_dead_ttl_is_archived_then_removed(
    storage: Storage, queue: str, tmp_path: Path
) -> None:
    app = _app(queue, tmp_path, dead_ttl=0.3)
    client = rdq.Client(storage, app)
    dead = await client.submit("bad", {"order": 1})
    young = None
    worker = fast_worker(app, storage, maintenance=True, stats_interval=0.05, purge_interval=0.1)
    async with running(worker):
        await wait_status(storage, dead.id, Status.DEAD)
        await eventually(lambda: _gone(storage, dead.id))
        young = await client.submit("bad", {"order": 2})
        await wait_status(storage, young.id, Status.DEAD)
    archived = {t.id: t for t in read_tasks(tmp_path)}
    assert dead.id in archived
    assert archived[dead.id].status == Status.DEAD
    assert archived[dead.id].attempts and archived[dead.id].attempts[-1].error_type
    assert archived[dead.id].payload == {"order": 1}
    assert not await _gone(storage, young.id), "a task younger than dead_ttl stays"
    if storage.capabilities().control:
        record = await read_record(storage, queue)
        assert record is not None and record.expired.get("DEAD", 0) >= 1
        assert record.archived.get("DEAD", 0) >= record.expired["DEAD"]
        assert record.runner is None, "the record is given back after each round"
    value = REGISTRY.get_sample_value("rdq_expired_total", {"queue": queue, "status": "DEAD"})
    assert value and value >= 1
    if storage.capabilities().audit:
        entries, _ = await storage.list_audit(AuditFilter(queue=queue, action="expire"), Page())
        assert entries and entries[0].count >= 1 and "dead_ttl" in (entries[0].reason or "")


@pytest.mark.asyncio
async def test_without_dead_ttl_dead_tasks_are_kept(
    storage: Storage, queue: str, tmp_path: Path
) -> None:
    app = _app(queue, tmp_path, task_ttl=0.1)
    client = rdq.Client(storage, app)
    dead = await client.submit("bad")
    worker = fast_worker(app, storage, maintenance=True, stats_interval=0.05, purge_interval=0.05)
    async with running(worker):
        await wait_status(storage, dead.id, Status.DEAD)
        import asyncio

        await asyncio.sleep(0.5)
    assert not await _gone(storage, dead.id)
    assert [t.id for t in read_tasks(tmp_path)] == []


@pytest.mark.asyncio
async def test_archive_succeeded_archives_succeeded_tasks_before_task_ttl_removes_them(
    storage: Storage, queue: str, tmp_path: Path
) -> None:
    app = _app(queue, tmp_path, task_ttl=0.2, archive_succeeded=True)
    client = rdq.Client(storage, app)
    done = await client.submit("ok", {"n": 7})
    worker = fast_worker(app, storage, maintenance=True, stats_interval=0.05, purge_interval=0.1)
    async with running(worker):
        await eventually(lambda: _gone(storage, done.id))
    archived = {t.id: t for t in read_tasks(tmp_path)}
    assert archived[done.id].status == Status.SUCCEEDED
    assert archived[done.id].payload == {"n": 7}


class _Refusing:
    """An archive that is down."""

    async def write(self, tasks: Sequence[Envelope]) -> str:
        raise OSError("the archive bucket is unreachable")


@pytest.mark.asyncio
async def test_an_archive_that_refuses_keeps_every_task_in_the_store(
    storage: Storage, queue: str
) -> None:
    app = _app(queue, _Refusing())
    client = rdq.Client(storage, app)
    dead = await client.submit("bad")
    await wait_status_after_run(app, storage, dead.id)
    now = await storage.now() + timedelta(seconds=1)
    with pytest.raises(OSError):
        await retain(
            storage,
            app.archive,
            queue,
            [Expiry(Status.DEAD, now, "dead_ttl 0s")],
            runner="test-runner",
            now=now,
        )
    assert not await _gone(storage, dead.id)
    if storage.capabilities().control:
        record = await read_record(storage, queue)
        assert record is not None and record.error and "unreachable" in record.error
        assert record.runner is None
    failures = REGISTRY.get_sample_value("rdq_archive_failures_total", {"queue": queue})
    assert failures == 1


async def wait_status_after_run(app: rdq.App, storage: Storage, task_id: str) -> None:
    async with running(fast_worker(app, storage)):
        await wait_status(storage, task_id, Status.DEAD)


@pytest.mark.asyncio
async def test_a_round_held_by_another_worker_is_skipped(
    storage: Storage, queue: str, tmp_path: Path
) -> None:
    if not storage.capabilities().control:
        pytest.skip("one retention runner per queue needs control")
    from rdq.retention._record import take

    app = _app(queue, tmp_path)
    dead = await rdq.Client(storage, app).submit("bad")
    await wait_status_after_run(app, storage, dead.id)
    now = await storage.now() + timedelta(seconds=1)
    assert await take(storage, queue, "other-worker", now, timedelta(minutes=5))
    expiry = [Expiry(Status.DEAD, now, "dead_ttl 0s")]
    done = await retain(storage, app.archive, queue, expiry, runner="me", now=now)
    assert done is not None and done.skipped
    assert not await _gone(storage, dead.id)
    later = now + timedelta(minutes=6)  # the other worker's lease lapsed: taken over
    done = await retain(storage, app.archive, queue, expiry, runner="me", now=later)
    assert done is not None and not done.skipped and done.count == 1
    assert await _gone(storage, dead.id)
