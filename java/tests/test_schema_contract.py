"""One schema and one set of statements for both languages: the Java binding runs the Python
plugin's SQL files, creates what the plugin expects, and refuses a schema that a newer rdq
migrated past what it knows."""

from __future__ import annotations

import secrets
import zipfile
from collections.abc import Iterator
from datetime import timedelta
from importlib import resources

import asyncpg
import pytest

from rdq import open_storage
from rdq.errors import StorageError
from rdq.spi import Attempt, Envelope, Outcome, Status
from rdq_java_bridge import BridgeServer, JavaBridgeStorage, java_classpath

from .conftest import drop_schema


@pytest.fixture
def fresh_schema(postgres_url: str) -> Iterator[str]:
    """A schema no migration has touched yet (dropped afterwards)."""
    name = f"java_{secrets.token_hex(4)}"
    yield name
    drop_schema(postgres_url, name)


def test_the_jar_holds_the_plugins_statements_and_no_others(java_build: str) -> None:
    """Every statement and fragment in the jar is the plugin's file, byte for byte, and the
    jar has every one of them (Sql.java compiles what the plugin's loader compiles)."""
    jar = next(p for p in java_classpath().split(":") if p.endswith("rdq-java.jar"))
    prefix = "io/rdq/postgres/sql/"
    with zipfile.ZipFile(jar) as bundle:
        bundled = {
            name.removeprefix(prefix): bundle.read(name)
            for name in bundle.namelist()
            if name.startswith(prefix) and name.endswith((".sql", ".part"))
        }
    folder = resources.files("rdq_postgres").joinpath("sql")
    shipped = {
        entry.name: entry.read_bytes()
        for entry in folder.iterdir()
        if entry.name.endswith((".sql", ".part"))
    }
    shipped.update(
        (f"migrations/{entry.name}", entry.read_bytes())
        for entry in folder.joinpath("migrations").iterdir()
        if entry.name.endswith(".sql")
    )
    assert sorted(bundled) == sorted(shipped)
    assert bundled == shipped


@pytest.mark.asyncio
async def test_java_migrates_the_schema_the_python_plugin_runs_on(
    postgres_url: str, bridge: BridgeServer, fresh_schema: str
) -> None:
    schema = fresh_schema
    java_url = f"java+{postgres_url}?schema={schema}&bridge={bridge.socket}"
    async with JavaBridgeStorage.from_url(java_url) as java:
        await java.migrate()
        await java.migrate()  # idempotent
        await java.enqueue(Envelope(id="made-in-java", queue="q", handler_ref="h"))
    conn = await asyncpg.connect(postgres_url)
    try:
        java_versions = await conn.fetch(
            f'SELECT version, name FROM "{schema}".schema_migrations ORDER BY version'
        )
    finally:
        await conn.close()
    async with open_storage(f"{postgres_url}?schema={schema}") as python:
        await python.migrate()  # the Python plugin takes over the schema Java made
        (claimed,) = await python.claim_due("q", 1, timedelta(seconds=30))
        assert claimed.task.id == "made-in-java"
        done = Attempt(number=1, outcome=Outcome.SUCCEEDED, worker_id="python")
        await python.complete("made-in-java", claimed.token, done)
        assert (await python.get("made-in-java")).status == Status.SUCCEEDED
    folder = resources.files("rdq_postgres").joinpath("sql", "migrations")
    numbered = sorted(int(f.name[:4]) for f in folder.iterdir() if f.name[:4].isdigit())
    assert [row["version"] for row in java_versions] == numbered, (
        "every migration the Python plugin ships, in order"
    )


@pytest.mark.asyncio
async def test_java_refuses_a_schema_newer_than_it_knows(
    postgres_url: str, bridge: BridgeServer, fresh_schema: str
) -> None:
    schema = fresh_schema
    async with open_storage(f"{postgres_url}?schema={schema}") as python:
        await python.migrate()
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute(
            f'INSERT INTO "{schema}".schema_migrations (version, name) '
            "VALUES (999, 'from_the_future')"
        )
    finally:
        await conn.close()
    java = JavaBridgeStorage.from_url(f"java+{postgres_url}?schema={schema}&bridge={bridge.socket}")
    with pytest.raises(StorageError) as refused:
        await java.connect()
    assert "version 999" in str(refused.value) and "newer" in str(refused.value)
    assert not java.is_open


@pytest.mark.asyncio
async def test_a_row_with_quarantined_values_reads_back_corrupt_and_still_resolves(
    postgres_url: str, bridge: BridgeServer, fresh_schema: str
) -> None:
    java_url = f"java+{postgres_url}?schema={fresh_schema}&bridge={bridge.socket}"
    async with JavaBridgeStorage.from_url(java_url) as java:
        await java.migrate()
        await java.enqueue(Envelope(id="quarantined", queue="q", handler_ref="h", payload=[1]))
        conn = await asyncpg.connect(postgres_url)
        try:
            await conn.execute(
                f'UPDATE "{fresh_schema}".task SET quarantine = $1::json WHERE id = $2',
                '{"headers": 5}',
                "quarantined",
            )
        finally:
            await conn.close()
        got = await java.get("quarantined")
        assert got.corrupt is not None and '{"headers": 5}' in got.corrupt
        assert got.payload == [1], "what did decode is filled in"
        (claimed,) = await java.claim_due("q", 1, timedelta(seconds=30))
        assert claimed.task.corrupt == got.corrupt
        failure = Attempt(number=1, outcome=Outcome.PERMANENT, error_type="rdq.CorruptTask")
        await java.dead_letter("quarantined", claimed.token, failure)
        dead = await java.get("quarantined")
        assert dead.status == Status.DEAD and dead.attempts == [failure]
        assert dead.corrupt == got.corrupt, "the quarantined values are kept"


DEEP = "[" * 3000 + "]" * 3000  # deeper than any JSON decoder recurses


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("extra", '{"x_new": ' + DEEP + "}"),
        ("retry", '{"max_attempts": ' + DEEP + "}"),
        ("created_at", "infinity"),
        ("completed_at", "12000-01-01 00:00:00+00"),
    ],
)
async def test_a_row_too_deep_or_too_far_in_time_reads_back_corrupt_beside_its_batch(
    postgres_url: str, bridge: BridgeServer, fresh_schema: str, column: str, value: str
) -> None:
    """A stored value no reader decodes (JSON nested deeper than the decoder goes; a time
    outside the years 1-9999, where task_time_range_check was dropped) never fails a read: the
    claim hands out its whole batch, that row marked corrupt."""
    java_url = f"java+{postgres_url}?schema={fresh_schema}&bridge={bridge.socket}"
    async with JavaBridgeStorage.from_url(java_url) as java:
        await java.migrate()
        for n in range(4):
            await java.enqueue(Envelope(id=f"t{n}", queue="q", handler_ref="h", payload=n))
        conn = await asyncpg.connect(postgres_url)
        try:
            cast = "json" if column in ("extra", "retry") else "timestamptz"
            await conn.execute(
                f'ALTER TABLE "{fresh_schema}".task DROP CONSTRAINT task_time_range_check'
            )
            await conn.execute(
                f'UPDATE "{fresh_schema}".task SET {column} = $1::text::{cast} WHERE id = $2',
                value,
                "t2",
            )
        finally:
            await conn.close()
        got = await java.get("t2")
        assert got.corrupt is not None and column in got.corrupt
        assert got.payload == 2, "what did decode is filled in"
        claimed = {c.task.id: c for c in await java.claim_due("q", 10, timedelta(seconds=30))}
        assert set(claimed) == {"t0", "t1", "t2", "t3"}
        assert [t for t, c in sorted(claimed.items()) if c.task.corrupt] == ["t2"]
        failure = Attempt(number=1, outcome=Outcome.PERMANENT, error_type="rdq.CorruptTask")
        await java.dead_letter("t2", claimed["t2"].token, failure)
        assert (await java.get("t2")).corrupt is not None
