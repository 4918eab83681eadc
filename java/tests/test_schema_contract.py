"""One schema for both languages: the Java binding creates what the Python plugin expects, and
refuses a schema that a newer rdq migrated past what it knows."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import timedelta

import asyncpg
import pytest

from rdq import open_storage
from rdq.errors import StorageError
from rdq.spi import Attempt, Envelope, Outcome, Status
from rdq_java_bridge import BridgeServer, JavaBridgeStorage

from .conftest import drop_schema


@pytest.fixture
def fresh_schema(postgres_url: str) -> Iterator[str]:
    """A schema no migration has touched yet (dropped afterwards)."""
    name = f"java_{secrets.token_hex(4)}"
    yield name
    drop_schema(postgres_url, name)


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
    assert [row["version"] for row in java_versions] == list(range(1, len(java_versions) + 1)), (
        "every migration up to the binding's version, in order"
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
