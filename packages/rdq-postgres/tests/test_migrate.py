"""Migrations: idempotent, and safe when many processes and connections run them at once."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys

import asyncpg
import pytest

from rdq_postgres import PostgresStorage
from rdq_postgres._sql import migrations


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
