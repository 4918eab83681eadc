"""``rdq copy``: every task with its history moves between stores (SQLite to SQLite, memory
to SQLite, SQLite to a real PostgreSQL, through Redis and MongoDB and back), resumably and
idempotently, and the copy is verified by the counts per queue and status."""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import sqlite3
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest
from click.testing import CliRunner, Result

from rdq import open_storage
from rdq.cli import main
from rdq.spi import (
    Attempt,
    Envelope,
    Outcome,
    RetryOverride,
    Selector,
    Storage,
    encode_envelope,
)
from rdq_sqlite import SqliteStorage

RDQ = str(Path(sys.executable).parent / "rdq")
LEASE = timedelta(minutes=10)


def attempt(number: int, outcome: Outcome, error: str | None = None) -> Attempt:
    now = datetime.now(UTC)
    return Attempt(
        number=number,
        outcome=outcome,
        error_type=error,
        error_message=f"{error} happened" if error else None,
        started_at=now - timedelta(seconds=1),
        finished_at=now,
        worker_id="w-1",
        traceback="Traceback (most recent call last):\n  ...\n" if error else None,
    )


async def populate(store: Storage, queue: str, count: int) -> None:
    """``count`` tasks of ``queue``: succeeded, dead, cancelled, rescheduled, in flight and
    pending ones, with attempts, headers, priorities, retry overrides and unknown fields."""
    tasks = [
        Envelope(
            id=f"{queue}-{n:05d}",
            queue=queue,
            handler_ref=f"app.tasks:handler_{n % 3}",
            payload={"n": n, "text": "é✓", "nested": [1, 2.5, None]},
            headers={"trace": f"t-{n}"} if n % 2 else {},
            priority=(n % 5) - 2,
            retry=RetryOverride(max_attempts=7) if n % 7 == 0 else None,
            extra={"x_tenant": f"tenant-{n % 4}"} if n % 4 == 0 else {},
        )
        for n in range(count)
    ]
    for start in range(0, count, 500):
        await store.enqueue_batch(tasks[start : start + 500])
    claimed = []
    while True:
        page = await store.claim_due(queue, 1000, LEASE, worker_id="w-1")
        if not page:
            break
        claimed.extend(page)
    for i, claim in enumerate(claimed):
        kind = i % 6
        if kind == 0:
            await store.complete(claim.task.id, claim.token, attempt(1, Outcome.SUCCEEDED))
        elif kind == 1:
            await store.dead_letter(
                claim.task.id, claim.token, attempt(1, Outcome.PERMANENT, "app.Gone")
            )
        elif kind in (2, 3):
            await store.reschedule(
                claim.task.id,
                claim.token,
                attempt(1, Outcome.FAILED, "ConnectionError"),
                datetime.now(UTC) + timedelta(hours=1),
            )
    # kind 4 stays IN_FLIGHT; kind 2 is cancelled while PENDING after its failed attempt
    await store.cancel(queue, [c.task.id for i, c in enumerate(claimed) if i % 6 == 2])
    dead = [c.task.id for i, c in enumerate(claimed) if i % 6 == 1]
    await store.redrive(queue, Selector.by_ids(*dead[::4]))  # some come back with a history


async def same_tasks(source: Storage, destination: Storage, queue: str, count: int) -> None:
    """Every task of ``queue`` is in both stores, identical field by field."""
    for n in range(count):
        task_id = f"{queue}-{n:05d}"
        mine, theirs = await source.get(task_id), await destination.get(task_id)
        assert encode_envelope(mine) == encode_envelope(theirs), task_id


def rdq_copy(*args: str) -> Result:
    return CliRunner().invoke(main, ["copy", *args], catch_exceptions=False)


@pytest.fixture
def source_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'source.db'}"


@pytest.fixture
def destination_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'destination.db'}"


async def fill(url: str, counts: dict[str, int]) -> None:
    # synced commits are not what this test is about: fill the source quickly
    async with SqliteStorage.from_url(url, synchronous="NORMAL") as store:
        for queue, count in counts.items():
            await populate(store, queue, count)


async def verify(source_url: str, destination_url: str, counts: dict[str, int]) -> None:
    async with (
        SqliteStorage.from_url(source_url) as source,
        SqliteStorage.from_url(destination_url) as destination,
    ):
        for queue, count in counts.items():
            await same_tasks(source, destination, queue, count)
            mine, theirs = await source.stats(queue), await destination.stats(queue)
            assert (mine.pending, mine.in_flight, mine.succeeded, mine.dlq_depth) == (
                theirs.pending,
                theirs.in_flight,
                theirs.succeeded,
                theirs.dlq_depth,
            )
            assert mine.cancelled == theirs.cancelled


@pytest.mark.slow
def test_a_copy_moves_every_task_with_its_history_and_verifies_the_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source_url: str, destination_url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    counts = {"orders": 1800, "emails": 600}
    asyncio.run(fill(source_url, counts))
    result = rdq_copy("--from", source_url, "--to", destination_url, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["verified"] is True
    assert report["copied"] == 2400 and report["already_present"] == 0
    statuses = {(row["queue"], row["status"]) for row in report["counts"]}
    assert statuses == {
        (queue, status)
        for queue in counts
        for status in ("PENDING", "IN_FLIGHT", "SUCCEEDED", "DEAD", "CANCELLED")
    }
    assert all(row["source"] == row["destination"] > 0 for row in report["counts"])
    asyncio.run(verify(source_url, destination_url, counts))
    assert not list(tmp_path.glob(".rdq-copy-*.json")), "a verified copy leaves no state file"

    again = rdq_copy("--from", source_url, "--to", destination_url, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["copied"] == 0  # idempotent: ids already there


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_copy_killed_mid_way_goes_on_where_it_stopped(
    tmp_path: Path, source_url: str, destination_url: str
) -> None:
    counts = {"orders": 3000}
    await fill(source_url, counts)
    args = ["copy", "--from", source_url, "--to", destination_url, "--batch", "100"]
    first = await asyncio.create_subprocess_exec(
        RDQ, *args, cwd=tmp_path, stderr=asyncio.subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    while _copied(tmp_path) < 800:  # the state file says how far it got
        assert first.returncode is None, "the copy finished before it could be stopped"
        assert time.monotonic() < deadline, "the copy made no progress"
        await asyncio.sleep(0.02)
    first.send_signal(signal.SIGSTOP)  # frozen where it is: what it saved can be checked
    stopped_at = _copied(tmp_path)
    # Still mid-way (a copy that had finished leaves no state file, and would read as 0).
    assert 800 <= stopped_at < 3000, stopped_at
    first.send_signal(signal.SIGKILL)
    await first.wait()

    second = await asyncio.create_subprocess_exec(
        RDQ,
        *args,
        "--json",
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await second.communicate()
    assert second.returncode == 0, err.decode()
    assert "resuming" in err.decode()
    report = json.loads(out)
    assert report["verified"] is True
    # it went on from its saved position: only the page in flight at the kill, at most, was
    # read again (a restart from scratch would find every task copied before the kill there)
    assert report["copied"] + report["already_present"] == 3000
    assert report["already_present"] <= 100
    await verify(source_url, destination_url, counts)


def _copied(directory: Path) -> int:
    states = list(directory.glob(".rdq-copy-*.json"))
    if not states:
        return 0
    try:
        return int(json.loads(states[0].read_text())["copied"])
    except (OSError, ValueError):
        return 0


def test_a_destination_holding_an_id_in_another_queue_stops_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source_url: str, destination_url: str
) -> None:
    monkeypatch.chdir(tmp_path)

    async def prepare() -> None:
        async with SqliteStorage.from_url(source_url) as source:
            await source.enqueue(Envelope(id="shared", queue="orders", handler_ref="m:f"))
        async with SqliteStorage.from_url(destination_url) as destination:
            await destination.enqueue(Envelope(id="shared", queue="emails", handler_ref="m:f"))

    asyncio.run(prepare())
    result = rdq_copy("--from", source_url, "--to", destination_url)
    assert result.exit_code == 1
    assert "'shared'" in result.output and "'emails'" in result.output


def test_counts_that_differ_fail_the_verification(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source_url: str, destination_url: str
) -> None:
    monkeypatch.chdir(tmp_path)

    async def prepare() -> None:
        async with SqliteStorage.from_url(source_url) as source:
            await source.enqueue(Envelope(id="a", queue="orders", handler_ref="m:f"))
        async with SqliteStorage.from_url(destination_url) as destination:
            await destination.enqueue(Envelope(id="b", queue="orders", handler_ref="m:f"))

    asyncio.run(prepare())
    result = rdq_copy("--from", source_url, "--to", destination_url)
    assert result.exit_code == 1
    assert "DIFFERS" in result.output
    assert "1 count(s) differ" in result.output


def test_a_corrupt_task_is_reported_and_fails_the_verification(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source_url: str, destination_url: str
) -> None:
    monkeypatch.chdir(tmp_path)

    async def prepare() -> None:
        async with SqliteStorage.from_url(source_url) as source:
            await source.enqueue(Envelope(id="good", queue="orders", handler_ref="m:f"))
            await source.enqueue(Envelope(id="spoiled", queue="orders", handler_ref="m:f"))

    asyncio.run(prepare())
    conn = sqlite3.connect(tmp_path / "source.db")
    conn.execute("UPDATE task SET payload = '{oops' WHERE id = 'spoiled'")
    conn.commit()
    conn.close()
    result = rdq_copy("--from", source_url, "--to", destination_url, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["corrupt"] == ["spoiled"]
    assert report["copied"] == 1
    assert "corrupt task(s) were not copied" in result.output


def test_the_same_store_on_both_sides_is_refused() -> None:
    result = rdq_copy("--from", "sqlite:///x.db", "--to", "sqlite:///x.db")
    assert result.exit_code == 2
    assert "same store" in result.output


def test_a_copy_from_the_memory_store_to_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, destination_url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    source_url = f"memory://copy-{uuid.uuid4().hex}"  # shared within this process
    counts = {"orders": 900, "emails": 300}

    async def prepare() -> None:
        async with open_storage(source_url) as source:
            for queue, count in counts.items():
                await populate(source, queue, count)

    asyncio.run(prepare())
    result = rdq_copy("--from", source_url, "--to", destination_url, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["verified"], report["copied"]) == (True, 1200)

    async def compare() -> None:
        async with (
            open_storage(source_url) as source,
            SqliteStorage.from_url(destination_url) as destination,
        ):
            for queue, count in counts.items():
                await same_tasks(source, destination, queue, count)

    asyncio.run(compare())


@pytest.fixture
def postgres_schema_url(postgres_url: str) -> Iterator[str]:
    """The server's URL with a schema of this test's own (dropped afterwards)."""
    schema = f"copy_{secrets.token_hex(4)}"
    yield f"{postgres_url}?schema={schema}"

    async def drop() -> None:
        conn = await asyncpg.connect(postgres_url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())


@pytest.mark.slow
def test_a_copy_from_sqlite_to_postgresql_verifies_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_schema_url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    source_url = f"sqlite:///{tmp_path / 'rdq.db'}"
    counts = {"orders": 2400, "emails": 600}

    async def prepare() -> None:
        async with SqliteStorage.from_url(source_url, synchronous="NORMAL") as source:
            for queue, count in counts.items():
                await populate(source, queue, count)

    asyncio.run(prepare())
    result = CliRunner().invoke(
        main, ["copy", "--from", source_url, "--to", postgres_schema_url, "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["verified"], report["copied"], report["corrupt"]) == (True, 3000, [])

    async def compare() -> None:
        async with (
            SqliteStorage.from_url(source_url) as source,
            open_storage(postgres_schema_url) as destination,
        ):
            for queue, count in counts.items():
                await same_tasks(source, destination, queue, count)

    asyncio.run(compare())


def _redis_url(redis_url: str) -> tuple[str, Callable[[], Awaitable[None]]]:
    prefix = f"copy{secrets.token_hex(4)}"

    async def drop() -> None:
        import redis.asyncio as redis

        client = redis.Redis.from_url(redis_url)
        try:
            keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()

    separator = "&" if "?" in redis_url else "?"
    return f"{redis_url}{separator}prefix={prefix}", drop


def _mongo_url(mongo_url: str) -> tuple[str, Callable[[], Awaitable[None]]]:
    database = f"rdq_copy_{secrets.token_hex(4)}"
    base, _, query = mongo_url.partition("?")
    scheme, _, rest = base.partition("://")
    url = f"{scheme}://{rest.split('/', 1)[0]}/{database}" + (f"?{query}" if query else "")

    async def drop() -> None:
        from pymongo import AsyncMongoClient

        client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(mongo_url)
        try:
            await client.drop_database(database)
        finally:
            await client.close()

    return url, drop


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["redis", "mongo"])
def test_a_copy_through_another_backend_and_back_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, backend: str
) -> None:
    monkeypatch.chdir(tmp_path)
    server_url = request.getfixturevalue(f"{backend}_url")
    middle_url, drop = (_redis_url if backend == "redis" else _mongo_url)(server_url)
    source_url = f"sqlite:///{tmp_path / 'source.db'}"
    back_url = f"sqlite:///{tmp_path / 'back.db'}"
    counts = {"orders": 240, "emails": 60}
    try:
        asyncio.run(fill(source_url, counts))
        for origin, target in ((source_url, middle_url), (middle_url, back_url)):
            result = rdq_copy("--from", origin, "--to", target, "--json")
            assert result.exit_code == 0, result.output
            assert json.loads(result.stdout)["copied"] == 300
        asyncio.run(verify(source_url, back_url, counts))
    finally:
        asyncio.run(drop())
