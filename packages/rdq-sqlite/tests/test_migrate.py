"""The schema: created with a new file, upgraded only by ``migrate``, and checked against the
version this release knows before any operation runs."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rdq.errors import StorageError
from rdq.spi import Attempt, Control, Envelope, Outcome, Selector, Status, handler_key
from rdq_sqlite import SqliteStorage
from rdq_sqlite._clock import host_now
from rdq_sqlite._migrate import LATEST, _statements, apply_migrations
from rdq_sqlite._queries import migrations


def user_version(database: Path) -> int:
    conn = sqlite3.connect(database)
    try:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
        return version
    finally:
        conn.close()


@pytest.mark.asyncio
async def test_a_new_file_gets_the_schema_when_the_store_connects(url: str, database: Path) -> None:
    async with SqliteStorage.from_url(url) as store:
        assert await store.enqueue(Envelope(id="a", queue="q", handler_ref="m:f"))
    assert user_version(database) == LATEST


@pytest.mark.asyncio
async def test_a_database_without_the_schema_says_to_run_migrate(url: str, database: Path) -> None:
    conn = sqlite3.connect(database)
    conn.execute("CREATE TABLE someone_elses (x INTEGER)")
    conn.commit()
    conn.close()
    async with SqliteStorage.from_url(url) as store:
        with pytest.raises(StorageError, match="rdq migrate"):
            await store.stats("q")
        with pytest.raises(StorageError, match="rdq migrate"):
            await store.enqueue(Envelope(id="a", queue="q", handler_ref="m:f"))
        await store.migrate()
        await store.migrate()  # idempotent
        assert await store.enqueue(Envelope(id="a", queue="q", handler_ref="m:f"))
    assert user_version(database) == LATEST


@pytest.mark.asyncio
async def test_a_schema_newer_than_this_release_is_refused_at_connect(
    url: str, database: Path
) -> None:
    async with SqliteStorage.from_url(url):
        pass
    conn = sqlite3.connect(database)
    conn.execute(f"PRAGMA user_version = {LATEST + 1}")
    conn.commit()
    conn.close()
    store = SqliteStorage.from_url(url)
    async with store:
        with pytest.raises(StorageError, match="upgrade rdq-sqlite"):
            await store.get("a")
        with pytest.raises(StorageError, match="upgrade rdq-sqlite"):
            await store.migrate()


@pytest.mark.asyncio
async def test_many_stores_connecting_and_migrating_at_once_apply_the_schema_once(
    url: str, database: Path
) -> None:
    stores = [SqliteStorage.from_url(url) for _ in range(6)]

    async def start(store: SqliteStorage) -> None:
        await store.connect()
        await store.migrate()

    try:
        await asyncio.gather(*(start(store) for store in stores))
        for n, store in enumerate(stores):
            assert await store.enqueue(Envelope(id=f"t{n}", queue="q", handler_ref="m:f"))
        assert (await stores[0].stats("q")).pending == len(stores)
    finally:
        for store in stores:
            await store.aclose()
    assert user_version(database) == LATEST


# --- the upgrade of a populated file to version 2 (contract version 3) -------------------------

_V1_INSERT = """
INSERT INTO task (
    id, queue, handler_ref, status, priority, payload, headers, attempt_count, redrive_count,
    attempts, last_error_type, created_at, next_attempt_at, lease_expires_at, claimed_by,
    claimed_at, token, completed_at, dead_lettered_at, cancelled_at, retry, format_version,
    extra
) VALUES (
    :id, 'q', :handler_ref, :status, :priority, :payload, '{}', :attempt_count, 0, :attempts,
    :last_error_type, :created_at, :next_attempt_at, :lease_expires_at, :claimed_by,
    :claimed_at, :token, :completed_at, :dead_lettered_at, :cancelled_at, NULL, 1, :extra
)
"""

_HOUR = 3600 * 10**6


def _v1_file(database: Path, now: int) -> None:
    """A database file as rdq-sqlite wrote it before version 2 (schema 0001 only), holding
    tasks in every status: due and waiting, of two priorities, a live and a lapsed lease."""
    conn = sqlite3.connect(database, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN IMMEDIATE")
    for statement in _statements(migrations()[0][2]):
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    conn.execute("UPDATE clock SET now_us = ?", (now,))
    base = {
        "handler_ref": "m:a",
        "priority": 0,
        "payload": '{"n": 1}',
        "attempt_count": 0,
        "attempts": "[]",
        "last_error_type": None,
        "created_at": now - _HOUR,
        "next_attempt_at": None,
        "lease_expires_at": None,
        "claimed_by": None,
        "claimed_at": None,
        "token": None,
        "completed_at": None,
        "dead_lettered_at": None,
        "cancelled_at": None,
        "extra": '{"x_future": 1}',
    }
    failed = (
        '[{"number": 1, "outcome": "PERMANENT", "error_type": "Boom", '
        '"started_at": "2030-01-01T00:00:00Z", "finished_at": "2030-01-01T00:00:01Z"}]'
    )
    rows = [
        {"id": "due-old", "status": "PENDING", "next_attempt_at": now - 3 * _HOUR // 4},
        {"id": "due-new", "status": "PENDING", "next_attempt_at": now - _HOUR // 2},
        {"id": "urgent", "status": "PENDING", "priority": 5, "next_attempt_at": now - 1},
        {"id": "other", "status": "PENDING", "handler_ref": "m:b", "next_attempt_at": now - 2},
        {"id": "later", "status": "PENDING", "next_attempt_at": now + _HOUR},
        {
            "id": "running",
            "status": "IN_FLIGHT",
            "lease_expires_at": now + _HOUR,
            "claimed_at": now - 1,
            "claimed_by": "w1",
            "token": "t-running",
        },
        {
            "id": "lapsed",
            "status": "IN_FLIGHT",
            "lease_expires_at": now - _HOUR // 4,
            "claimed_at": now - _HOUR // 3,
            "claimed_by": "w2",
            "token": "t-lapsed",
        },
        {"id": "done", "status": "SUCCEEDED", "completed_at": now - 10, "attempt_count": 1},
        {
            "id": "dead",
            "status": "DEAD",
            "dead_lettered_at": now - 20,
            "attempt_count": 1,
            "attempts": failed,
            "last_error_type": "Boom",
        },
        {"id": "gone", "status": "CANCELLED", "cancelled_at": now - 30},
    ]
    conn.executemany(_V1_INSERT, [base | row for row in rows])
    conn.execute("COMMIT")
    conn.close()


@pytest.mark.asyncio
async def test_migrate_upgrades_a_populated_version_1_file_in_place(
    url: str, database: Path
) -> None:
    _v1_file(database, host_now())
    store = SqliteStorage.from_url(url)
    async with store:
        with pytest.raises(StorageError, match="has schema version 1"):
            await store.get("due-old")
        assert await store.migrate() == [
            "0002_flow_control",
            "0003_claim_order",
            "0004_dedup_keys",
            "0005_payload_refs",
            "0006_claim_groups",
        ]
        assert await store.migrate() == []
        assert user_version(database) == LATEST

        # every task as it was, with no keys; counts per status unchanged
        stats = await store.stats("q")
        assert (stats.pending, stats.in_flight, stats.succeeded, stats.dlq_depth) == (5, 2, 1, 1)
        assert stats.cancelled == 1
        dead = await store.get("dead")
        assert dead.keys == [] and dead.corrupt is None
        assert [a.error_type for a in dead.attempts] == ["Boom"]
        assert dead.extra == {"x_future": 1}
        running = await store.get("running")
        assert (running.status, running.claimed_by, running.keys) == (Status.IN_FLIGHT, "w1", [])

        # the rebuilt claim index: priority first, then oldest due, the lapsed lease in its
        # place (its due time is when it lapsed), nothing not yet due, nothing leased
        claimed = await store.claim_due("q", 10, timedelta(minutes=5))
        assert [c.task.id for c in claimed] == ["urgent", "due-old", "due-new", "lapsed", "other"]
        lapsed = next(c.task for c in claimed if c.task.id == "lapsed")
        assert [a.outcome for a in lapsed.attempts] == [Outcome.LEASE_EXPIRED]

        # the old holder of a live lease still resolves it; controls work on the upgraded file
        await store.complete("running", "t-running", _done())
        assert await store.redrive("q", Selector(ids=["dead"])) == 1
        await store.put_control(
            Control(queue="q", key=handler_key("m:a"), paused=True), expected_version=0
        )
        assert await store.claim_due("q", 10, timedelta(minutes=5)) == []
        assert await store.enqueue(Envelope(id="keyed", queue="q", handler_ref="m:b", keys=["k"]))
        assert [c.task.id for c in await store.claim_due("q", 10, timedelta(minutes=5))] == [
            "keyed"
        ]
        assert (await store.get("keyed")).keys == ["k"]


def _done() -> Attempt:
    at = datetime.now(UTC)
    return Attempt(number=1, outcome=Outcome.SUCCEEDED, started_at=at, finished_at=at)


def test_the_upgrade_rebuilds_the_claim_index_on_claim_at_and_adds_the_new_tables(
    database: Path,
) -> None:
    _v1_file(database, host_now())
    conn = sqlite3.connect(database, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        assert apply_migrations(conn, str(database)) == [
            "0002_flow_control",
            "0003_claim_order",
            "0004_dedup_keys",
            "0005_payload_refs",
            "0006_claim_groups",
        ]
        conn.execute("COMMIT")
        schema = dict(conn.execute("SELECT name, sql FROM sqlite_master").fetchall())
        assert "claim_at" in schema["task_claim"]
        assert "WHERE held IS NOT NULL" in schema["task_held"]
        assert {"control", "worker", "counts", "counts_minute"} <= set(schema)
        assert conn.execute("SELECT count(*) FROM task WHERE keys = '[]'").fetchone()[0] == 10
        assert conn.execute("SELECT count(*) FROM task WHERE held IS NOT NULL").fetchone() == (0,)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()


@pytest.mark.asyncio
async def test_the_upgrade_to_version_6_groups_the_tasks_of_queues_fair_or_aged_already(
    url: str, database: Path
) -> None:
    """A version 3 file whose queue was made fair (and another aged) before task.grp existed:
    the migration groups their tasks, and the claims share the fair queue among its groups."""
    conn = sqlite3.connect(database, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    for _, _, script in migrations()[:3]:
        for statement in _statements(script):
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 3")
    now = host_now()
    conn.executemany(
        "INSERT INTO control (queue, key, version, updated_at, fair, aging) "
        "VALUES (?, '*', 1, 0, ?, ?)",
        [("fair", "tenant:", None), ("aged", None, 5.0)],
    )
    conn.executemany(
        "INSERT INTO task (id, queue, handler_ref, status, next_attempt_at, created_at, keys) "
        "VALUES (?, ?, 'm:f', 'PENDING', ?, 0, ?)",
        [(f"big-{n}", "fair", now - 10_000_000 + n, '["tenant:big"]') for n in range(20)]
        + [(f"small-{n}", "fair", now - 1_000 + n, '["x", "tenant:small"]') for n in range(2)]
        + [("loose", "fair", now - 5_000_000, "[]")]
        + [("aged-1", "aged", now - 1_000, '["tenant:a"]'), ("plain-1", "plain", now, "[]")],
    )
    conn.execute("COMMIT")
    conn.close()
    async with SqliteStorage.from_url(url) as store:
        assert await store.migrate() == [
            "0004_dedup_keys",
            "0005_payload_refs",
            "0006_claim_groups",
        ]
        claimed = [c.task.id for c in await store.claim_due("fair", 6, timedelta(minutes=5))]
    groups = dict(
        sqlite3.connect(database)
        .execute(
            "SELECT id, grp FROM task WHERE id IN "
            "('big-0', 'small-0', 'loose', 'aged-1', 'plain-1')"
        )
        .fetchall()
    )
    assert groups == {
        "big-0": "tenant:big",
        "small-0": "tenant:small",
        "loose": "",
        "aged-1": "",
        "plain-1": None,
    }
    # every group's first, then every group's second: '' has one task, the others two or more
    assert sorted(claimed[:3]) == ["big-0", "loose", "small-0"], claimed
    assert sorted(claimed[3:5]) == ["big-1", "small-1"], claimed
