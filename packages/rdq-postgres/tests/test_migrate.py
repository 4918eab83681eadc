"""Migrations: idempotent, and safe when many processes and connections run them at once."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from datetime import timedelta

import asyncpg
import pytest

from rdq_postgres import PostgresStorage
from rdq_postgres._queries import migrations


@pytest.mark.asyncio
async def test_concurrent_migrate_from_processes_and_connections(postgres_url: str) -> None:
    schema = f"m_{secrets.token_hex(5)}"
    url = f"{postgres_url}?schema={schema}"
    rdq_cli = os.path.join(os.path.dirname(sys.executable), "rdq")
    processes = [
        await asyncio.create_subprocess_exec(
            rdq_cli,
            "migrate",
            "--storage",
            url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(3)
    ]
    stores = [PostgresStorage.from_url(url) for _ in range(4)]
    try:
        await asyncio.gather(*(store.connect() for store in stores))
        applied = await asyncio.gather(*(store.migrate() for store in stores))
        for process in processes:
            _, err = await process.communicate()
            assert process.returncode == 0, err.decode()
        assert await stores[0].migrate() == [], "up to date: nothing applied"
        every = [f"{v:04d}_{name}" for v, name, _ in migrations(schema, "c")]
        for steps in applied:
            assert steps == sorted(steps) and set(steps) <= set(every), steps
        mine = [step for steps in applied for step in steps]
        assert len(mine) == len(set(mine)), f"a migration applied twice: {applied}"
        conn = await asyncpg.connect(postgres_url)
        try:
            versions = await conn.fetch(
                f'SELECT version FROM "{schema}".schema_migrations ORDER BY version'
            )
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        finally:
            await conn.close()
        assert [r["version"] for r in versions] == [v for v, _, _ in migrations(schema, "c")]
    finally:
        await asyncio.gather(*(store.aclose() for store in stores))


@pytest.mark.asyncio
async def test_migrate_returns_the_migrations_it_applied(postgres_url: str, schema: str) -> None:
    async with PostgresStorage.from_url(f"{postgres_url}?schema={schema}") as store:
        assert await store.migrate() == [
            "0001_task_table",
            "0002_id_conflict",
            "0003_second_revision",
            "0004_time_range",
            "0005_flow_control",
            "0006_claim_order",
            "0007_claim_function",
            "0008_claim_plan",
            "0009_claim_plan_statistics",
            "0010_lapsed_lease_slots",
            "0011_dedup_keys",
            "0012_payload_refs",
            "0013_claim_costs",
            "0014_claim_floor",
            "0015_wide_stripes",
            "0016_one_count",
            "0017_lease_floor",
            "0018_rate_buckets",
            "0019_controlled_claim_plan",
            "0020_limit_claims_side_by_side",
        ]
        assert await store.migrate() == []


async def _schema_at(conn: asyncpg.Connection, schema: str, version: int) -> None:
    """Create ``schema`` as an earlier release left it: migrations up to ``version`` only."""
    from rdq_postgres._queries import Queries

    await conn.execute(Queries(schema, f"{schema}_due").script("migrate_prepare"))
    for number, name, sql in migrations(schema, f"{schema}_due"):
        if number <= version:
            await conn.execute(sql)
            await conn.execute(
                f'INSERT INTO "{schema}".schema_migrations (version, name) VALUES ($1, $2)',
                number,
                name,
            )


@pytest.mark.asyncio
async def test_code_newer_than_the_schema_says_to_migrate_and_migrate_upgrades_it(
    postgres_url: str,
) -> None:
    """A schema at version 1 (as an earlier release left it) with a task in it: operations
    that need later migrations fail with an error that says to migrate; after ``migrate()``
    they work and the stored task is untouched."""
    from rdq.errors import StorageError
    from rdq.spi import Envelope

    schema = f"m_{secrets.token_hex(5)}"
    store = PostgresStorage.from_url(f"{postgres_url}?schema={schema}")
    conn = await asyncpg.connect(postgres_url)
    try:
        await _schema_at(conn, schema, 1)
        await conn.execute(
            f'INSERT INTO "{schema}".task (id, queue, handler_ref, payload, status, '
            "next_attempt_at) VALUES ('old-1', 'q', 'job', '{\"n\": 1}', 'PENDING', now())"
        )
        await store.connect()
        batch = [Envelope(id=f"new-{i}", queue="q", handler_ref="job") for i in range(3)]
        with pytest.raises(StorageError, match="rdq migrate"):
            await store.enqueue_batch(batch)
        with pytest.raises(StorageError, match="rdq migrate"):
            await store.get("old-1")

        assert await store.migrate() == [
            "0002_id_conflict",
            "0003_second_revision",
            "0004_time_range",
            "0005_flow_control",
            "0006_claim_order",
            "0007_claim_function",
            "0008_claim_plan",
            "0009_claim_plan_statistics",
            "0010_lapsed_lease_slots",
            "0011_dedup_keys",
            "0012_payload_refs",
            "0013_claim_costs",
            "0014_claim_floor",
            "0015_wide_stripes",
            "0016_one_count",
            "0017_lease_floor",
            "0018_rate_buckets",
            "0019_controlled_claim_plan",
            "0020_limit_claims_side_by_side",
        ]
        assert await store.migrate() == []
        assert await store.enqueue_batch(batch) == [True, True, True]
        old = await store.get("old-1")
        assert (old.handler_ref, old.payload, old.priority, old.corrupt) == (
            "job",
            {"n": 1},
            0,
            None,
        )
        versions = await conn.fetch(f'SELECT version FROM "{schema}".schema_migrations')
        assert sorted(r["version"] for r in versions) == [v for v, _, _ in migrations(schema, "c")]
    finally:
        await store.aclose()
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


@pytest.mark.asyncio
async def test_upgrading_to_version_3_keeps_values_the_new_constraints_refuse_in_quarantine(
    postgres_url: str,
) -> None:
    """Values an earlier schema let foreign writers store, which version 3's CHECK
    constraints refuse, are moved to the ``quarantine`` column (raw) with the column's default
    in their place; missing status times are filled in; nothing else changes."""
    schema = f"m_{secrets.token_hex(5)}"
    conn = await asyncpg.connect(postgres_url)
    store = PostgresStorage.from_url(f"{postgres_url}?schema={schema}")
    s = f'"{schema}"'
    try:
        await _schema_at(conn, schema, 2)
        insert = (
            f"INSERT INTO {s}.task (id, queue, handler_ref, status, next_attempt_at, "
            "dead_lettered_at, headers, attempts, extra, retry) "
            "VALUES ($1, 'q', 'job', $2, now(), $3, $4::json, $5::json, $6::json, $7::json)"
        )
        await conn.execute(insert, "fine", "PENDING", None, '{"h":"v"}', "[]", "{}", None)
        await conn.execute(insert, "bad-attempts", "PENDING", None, "{}", '{"x":1}', "{}", None)
        await conn.execute(insert, "bad-headers", "PENDING", None, "[1]", "[]", "{}", None)
        await conn.execute(insert, "bad-extra", "PENDING", None, "{}", "[]", "[1,2]", None)
        await conn.execute(insert, "bad-retry", "PENDING", None, "{}", "[]", "{}", '"lots"')
        await conn.execute(insert, "dead-no-time", "DEAD", None, "{}", "[]", "{}", None)

        async with store:
            await store.migrate()
            rows = {
                r["id"]: r
                for r in await conn.fetch(
                    f"SELECT id, quarantine::text AS q, attempts::text AS a, headers::text AS h,"
                    f" extra::text AS e, retry::text AS r, dead_lettered_at, created_at"
                    f" FROM {s}.task"
                )
            }
            assert rows["fine"]["q"] is None and rows["fine"]["h"] == '{"h":"v"}'
            assert rows["bad-attempts"]["q"] == '{"attempts":{"x":1}}'
            assert rows["bad-attempts"]["a"] == "[]"
            assert rows["bad-headers"]["q"] == '{"headers":[1]}'
            assert rows["bad-headers"]["h"] == "{}"
            assert rows["bad-extra"]["q"] == '{"extra":[1,2]}'
            assert rows["bad-extra"]["e"] == "{}"
            assert rows["bad-retry"]["q"] == '{"retry":"lots"}'
            assert rows["bad-retry"]["r"] is None
            dead = rows["dead-no-time"]
            assert dead["q"] is None and dead["dead_lettered_at"] == dead["created_at"]

            for task_id, row in rows.items():
                corrupt = (await store.get(task_id)).corrupt
                if row["q"] is None:
                    assert corrupt is None, task_id
                else:  # marked, so that the worker dead-letters it as rdq.CorruptTask
                    [(name, raw)] = json.loads(row["q"]).items()
                    assert corrupt is not None, task_id
                    assert (
                        f"column {name}" in corrupt
                        and json.dumps(raw, separators=(",", ":")) in corrupt
                    )
            assert (await store.stats("q")).dlq_depth == 1
            with pytest.raises(asyncpg.CheckViolationError):
                await conn.execute(f"UPDATE {s}.task SET attempts = '{{}}' WHERE id = 'fine'")
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


@pytest.mark.asyncio
async def test_upgrading_to_version_4_keeps_times_outside_years_1_to_9999_in_quarantine(
    postgres_url: str,
) -> None:
    """Times an earlier schema let foreign writers store that no client library can hold are
    moved, raw, to ``quarantine`` with the nearest time in range in their place: the task reads
    as corrupt naming the column and is claimed, and the new CHECK refuses such times."""
    schema = f"m_{secrets.token_hex(5)}"
    conn = await asyncpg.connect(postgres_url)
    store = PostgresStorage.from_url(f"{postgres_url}?schema={schema}")
    s = f'"{schema}"'
    try:
        await _schema_at(conn, schema, 3)
        insert = (
            f"INSERT INTO {s}.task (id, queue, handler_ref, status, created_at, next_attempt_at)"
            " VALUES ($1, 'q', 'job', 'PENDING', $2::text::timestamptz, $3::text::timestamptz)"
        )
        await conn.execute(insert, "fine", "2000-01-01 00:00:00+00", "2000-01-01 00:00:00+00")
        await conn.execute(insert, "far", "12000-01-01 00:00:00+00", "2001-01-01 00:00:00+00")
        await conn.execute(insert, "never", "2000-01-01 00:00:00+00", "infinity")
        await conn.execute(insert, "first", "2000-01-01 00:00:00+00", "-infinity")
        async with store:
            await store.migrate()
            rows = {
                r["id"]: r
                for r in await conn.fetch(
                    f"SELECT id, quarantine::text AS q, created_at::text AS c,"
                    f" next_attempt_at::text AS n FROM {s}.task"
                )
            }
            assert rows["fine"]["q"] is None and rows["fine"]["n"] == "2000-01-01 00:00:00+00"
            assert rows["far"]["q"] == '{"created_at":"12000-01-01 00:00:00+00"}'
            assert rows["far"]["c"] == "9999-12-31 23:59:59.999999+00"
            assert rows["never"]["q"] == '{"next_attempt_at":"infinity"}'
            assert rows["never"]["n"] == "9999-12-31 23:59:59.999999+00"
            assert rows["first"]["q"] == '{"next_attempt_at":"-infinity"}'
            assert rows["first"]["n"] == "0001-01-01 00:00:00+00"
            for task_id in ("far", "never"):
                got = await store.get(task_id)
                column = "created_at" if task_id == "far" else "next_attempt_at"
                assert got.corrupt is not None and f"column {column}" in got.corrupt
            assert (await store.get("fine")).corrupt is None
            claimed = await store.claim_due("q", 10, timedelta(minutes=1))
            assert [c.task.id for c in claimed] == ["first", "fine", "far"]
            with pytest.raises(asyncpg.CheckViolationError):
                await conn.execute(f"UPDATE {s}.task SET created_at = 'infinity' WHERE id = 'fine'")
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


@pytest.mark.asyncio
async def test_upgrading_a_populated_version_4_schema_keeps_every_task_and_claims_honour_controls(
    postgres_url: str,
) -> None:
    """Migration 0005 upgrades in place: the tasks a version-4 schema holds, in every status
    and mid-lease, read back unchanged with no keys; the claim, a held lease and its slot, the
    control records and tasks with keys all work on the upgraded schema."""
    from rdq.spi import QUEUE_KEY, Attempt, Control, Envelope, Outcome

    schema = f"m_{secrets.token_hex(5)}"
    conn = await asyncpg.connect(postgres_url)
    store = PostgresStorage.from_url(f"{postgres_url}?schema={schema}")
    s = f'"{schema}"'
    try:
        await _schema_at(conn, schema, 4)
        await conn.execute(
            f"INSERT INTO {s}.task (id, queue, handler_ref, payload, status, next_attempt_at,"
            " priority) SELECT 'p-' || n, 'q', 'job', json_build_object('n', n), 'PENDING',"
            " now() - n * interval '1 second', n % 3 FROM generate_series(1, 500) AS n"
        )
        await conn.execute(
            f"INSERT INTO {s}.task (id, queue, handler_ref, status, lease_expires_at,"
            " claimed_at, claimed_by, token, next_attempt_at) VALUES ('held', 'q', 'job',"
            " 'IN_FLIGHT', now() + interval '1 hour', now(), 'w-1', 'tok', now())"
        )
        await conn.execute(
            f"INSERT INTO {s}.task (id, queue, handler_ref, status, dead_lettered_at,"
            " error_type, attempts, attempt_count) VALUES ('dead', 'q', 'job', 'DEAD', now(),"
            """ 'E', '[{"number":1,"outcome":"FAILED","error_type":"E"}]', 1)"""
        )
        before = {
            r["id"]: dict(r)
            for r in await conn.fetch(f"SELECT id, payload::text, status FROM {s}.task")
        }
        async with store:
            assert await store.migrate() == [
                "0005_flow_control",
                "0006_claim_order",
                "0007_claim_function",
                "0008_claim_plan",
                "0009_claim_plan_statistics",
                "0010_lapsed_lease_slots",
                "0011_dedup_keys",
                "0012_payload_refs",
                "0013_claim_costs",
                "0014_claim_floor",
                "0015_wide_stripes",
                "0016_one_count",
                "0017_lease_floor",
                "0018_rate_buckets",
                "0019_controlled_claim_plan",
                "0020_limit_claims_side_by_side",
            ]
            after = {
                r["id"]: dict(r)
                for r in await conn.fetch(f"SELECT id, payload::text, status FROM {s}.task")
            }
            assert after == before
            assert await conn.fetchval(f"SELECT count(*) FROM {s}.task WHERE keys <> '{{}}'") == 0
            dead = await store.get("dead")
            assert (dead.status, dead.keys, dead.corrupt, dead.attempts[0].error_type) == (
                "DEAD",
                [],
                None,
                "E",
            )
            # the lease held across the upgrade still fences, and takes a slot of the queue
            limit = await store.put_control(
                Control(queue="q", key=QUEUE_KEY, concurrency=3), expected_version=0
            )
            (listed,) = await store.list_controls("q")
            assert listed.in_use == 1
            claimed = await store.claim_due("q", 10, timedelta(minutes=5))
            assert len(claimed) == 2, "3 slots, one held since before the upgrade"
            assert [c.task.priority for c in claimed] == [2, 2]
            await store.complete("held", "tok", Attempt(number=1, outcome=Outcome.SUCCEEDED))
            await store.delete_control("q", QUEUE_KEY, expected_version=limit.version)
            task = Envelope(id="new-keyed", queue="q", handler_ref="job", keys=["dep:x"])
            assert await store.enqueue(task)
            assert (await store.get("new-keyed")).keys == ["dep:x"]
            assert len(await store.claim_due("q", 1000, timedelta(minutes=5))) == 499
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


@pytest.mark.asyncio
async def test_upgrading_a_populated_version_10_schema_to_dedup_keys_keeps_every_task(
    postgres_url: str,
) -> None:
    """Migration 0011 (dedup keys) upgrades in place: the tasks a version-10 schema holds read
    back unchanged, and admissions under a key work beside them; a task deleted takes its key
    with it."""
    from rdq.spi import AdmitOutcome, Dedup, Envelope, Selector

    schema = f"m_{secrets.token_hex(5)}"
    conn = await asyncpg.connect(postgres_url)
    store = PostgresStorage.from_url(f"{postgres_url}?schema={schema}")
    s = f'"{schema}"'
    try:
        await _schema_at(conn, schema, 10)
        await conn.execute(
            f"INSERT INTO {s}.task (id, queue, handler_ref, payload, status, next_attempt_at)"
            " SELECT 'p-' || n, 'q', 'job', json_build_object('n', n), 'PENDING', now()"
            " FROM generate_series(1, 300) AS n"
        )
        before = await conn.fetch(f"SELECT id, payload::text, status FROM {s}.task ORDER BY id")
        async with store:
            assert await store.migrate() == [
                "0011_dedup_keys",
                "0012_payload_refs",
                "0013_claim_costs",
                "0014_claim_floor",
                "0015_wide_stripes",
                "0016_one_count",
                "0017_lease_floor",
                "0018_rate_buckets",
                "0019_controlled_claim_plan",
                "0020_limit_claims_side_by_side",
            ]
            after = await conn.fetch(f"SELECT id, payload::text, status FROM {s}.task ORDER BY id")
            assert [dict(r) for r in after] == [dict(r) for r in before]
            first = Envelope(id="k-1", queue="q", handler_ref="job")
            added = await store.admit(first, Dedup(key="order-7"))
            assert added.outcome == AdmitOutcome.ADDED
            again = await store.admit(
                Envelope(id="k-2", queue="q", handler_ref="job"), Dedup(key="order-7")
            )
            assert (again.outcome, again.task_id) == (AdmitOutcome.SKIPPED, "k-1")
            assert await store.cancel("q", ["k-1"]) == 1
            assert await store.purge("q", Selector.by_ids("k-1")) == 1
            assert await conn.fetchval(f"SELECT count(*) FROM {s}.dedup") == 0, "gone with it"
            assert (await store.stats("q")).pending == 300
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


@pytest.mark.asyncio
async def test_upgrading_a_populated_version_10_schema_to_the_claim_floor_in_place(
    postgres_url: str,
) -> None:
    """Migrations 0011-0014 upgrade a populated version-10 schema in place: tasks in every
    status, a lapsed lease and a lease held across the upgrade, tasks a version-10 claim
    already took; the tasks read back unchanged, the first claims start from no floor and
    take the oldest due first (the lapsed lease among them), a task enqueued due in the past
    after them goes next, the held lease still fences, and every due task is claimed."""
    from rdq.spi import Attempt, Envelope, Outcome

    schema = f"m_{secrets.token_hex(5)}"
    conn = await asyncpg.connect(postgres_url)
    store = PostgresStorage.from_url(f"{postgres_url}?schema={schema}")
    s = f'"{schema}"'
    try:
        await _schema_at(conn, schema, 10)
        await conn.execute(
            f"INSERT INTO {s}.task (id, queue, handler_ref, payload, status, next_attempt_at,"
            " priority) SELECT 'p-' || lpad(n::text, 4, '0'), 'q', 'job',"
            " json_build_object('n', n), 'PENDING', now() - interval '1 hour'"
            " + n * interval '1 second', 0 FROM generate_series(1, 2000) AS n"
        )
        await conn.execute(
            f"INSERT INTO {s}.task (id, queue, handler_ref, status, lease_expires_at,"
            " claimed_at, claimed_by, token, next_attempt_at) VALUES"
            " ('held', 'q', 'job', 'IN_FLIGHT', now() + interval '1 hour', now(), 'w-1', 'tok',"
            " now()), ('lapsed', 'q', 'job', 'IN_FLIGHT', now() - interval '2 hours',"
            " now() - interval '3 hours', 'w-0', 'old', now() - interval '3 hours')"
        )
        await conn.execute(
            f"INSERT INTO {s}.task (id, queue, handler_ref, status, completed_at)"
            " SELECT 'done-' || n, 'q', 'job', 'SUCCEEDED', now() FROM generate_series(1, 300) n"
        )
        await conn.execute(
            f"INSERT INTO {s}.task (id, queue, handler_ref, status, dead_lettered_at,"
            " error_type, attempts, attempt_count) VALUES ('dead', 'q', 'job', 'DEAD', now(),"
            """ 'E', '[{"number":1,"outcome":"FAILED","error_type":"E"}]', 1)"""
        )
        # a version-10 claim took the five oldest PENDING tasks before the upgrade
        taken = await conn.fetch(f"SELECT id FROM {s}.claim_due('q', 6, 300000000, 'w-10')")
        assert sorted(r["id"] for r in taken) == ["lapsed"] + [f"p-000{n}" for n in range(1, 6)]
        columns = "id, payload::text, status, token, next_attempt_at, lease_expires_at"
        before = {r["id"]: dict(r) for r in await conn.fetch(f"SELECT {columns} FROM {s}.task")}
        async with store:
            assert await store.migrate() == [
                "0011_dedup_keys",
                "0012_payload_refs",
                "0013_claim_costs",
                "0014_claim_floor",
                "0015_wide_stripes",
                "0016_one_count",
                "0017_lease_floor",
                "0018_rate_buckets",
                "0019_controlled_claim_plan",
                "0020_limit_claims_side_by_side",
            ]
            after = {r["id"]: dict(r) for r in await conn.fetch(f"SELECT {columns} FROM {s}.task")}
            assert after == before
            assert await conn.fetchval(f"SELECT count(*) FROM {s}.claim_floor") == 0
            first = await store.claim_due("q", 10, timedelta(minutes=5))
            assert [c.task.id for c in first] == [f"p-{n:04d}" for n in range(6, 16)]
            now = await store.now()
            late = Envelope(
                id="late", queue="q", handler_ref="job", next_attempt_at=now - timedelta(days=1)
            )
            assert await store.enqueue(late)
            (next_one,) = await store.claim_due("q", 1, timedelta(minutes=5))
            assert next_one.task.id == "late"
            done = Attempt(number=1, outcome=Outcome.SUCCEEDED)
            await store.complete("held", "tok", done)
            rest = []
            while batch := await store.claim_due("q", 1000, timedelta(minutes=5)):
                rest += [c.task.id for c in batch]
            assert rest == [f"p-{n:04d}" for n in range(16, 2001)]
            assert (await store.get("dead")).status == "DEAD"
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()
