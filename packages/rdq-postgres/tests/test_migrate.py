"""Migrations: idempotent, and safe when many processes and connections run them at once."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys

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
        await asyncio.gather(*(store.migrate() for store in stores))
        for process in processes:
            _, err = await process.communicate()
            assert process.returncode == 0, err.decode()
        await stores[0].migrate()  # and again, when up to date
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
async def test_code_newer_than_the_schema_says_to_migrate_and_migrate_upgrades_it(
    postgres_url: str,
) -> None:
    """A schema at version 1 (as an earlier release left it) with tasks in it: a batch
    enqueue, which needs migration 0002, fails with an error that says to migrate; after
    ``migrate()`` it works and the stored task is untouched."""
    from rdq.errors import StorageError
    from rdq.spi import Envelope

    schema = f"m_{secrets.token_hex(5)}"
    store = PostgresStorage.from_url(f"{postgres_url}?schema={schema}")
    conn = await asyncpg.connect(postgres_url)
    try:
        await store.connect()
        await store.migrate()
        await conn.execute(f'DROP FUNCTION "{schema}".id_conflict(text, text)')
        await conn.execute(f'DELETE FROM "{schema}".schema_migrations WHERE version >= 2')
        assert await store.enqueue(Envelope(id="old-1", queue="q", handler_ref="job"))

        batch = [Envelope(id=f"new-{i}", queue="q", handler_ref="job") for i in range(3)]
        with pytest.raises(StorageError, match="rdq migrate"):
            await store.enqueue_batch(batch)

        await store.migrate()
        assert await store.enqueue_batch(batch) == [True, True, True]
        assert (await store.get("old-1")).handler_ref == "job"
        versions = await conn.fetch(f'SELECT version FROM "{schema}".schema_migrations')
        assert sorted(r["version"] for r in versions) == [v for v, _, _ in migrations(schema, "c")]
    finally:
        await store.aclose()
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()
