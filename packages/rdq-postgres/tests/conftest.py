"""Fixtures: a migrated PostgresStorage in a schema of its own for every test."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import asyncpg
import pytest_asyncio

from rdq_postgres import PostgresStorage


@pytest_asyncio.fixture
async def schema(postgres_url: str) -> AsyncIterator[str]:
    """A fresh schema name, dropped after the test."""
    name = f"t_{secrets.token_hex(6)}"
    yield name
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


@pytest_asyncio.fixture
async def storage(postgres_url: str, schema: str) -> AsyncIterator[PostgresStorage]:
    """A connected, migrated store in its own schema."""
    store = PostgresStorage.from_url(postgres_url, schema=schema)
    async with store:
        await store.migrate()
        yield store
