"""The whole compliance kit (chaos test included) against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
import pytest_asyncio

from rdq.spi import Storage
from rdq_compliance import StorageSuite
from rdq_postgres import PostgresStorage


@pytest.fixture(scope="module")
def kit_url(postgres_url: str) -> Iterator[str]:
    """The server's URL with a schema of this module's own (dropped afterwards)."""
    schema = f"kit_{secrets.token_hex(4)}"
    yield f"{postgres_url}?schema={schema}"

    async def drop() -> None:
        conn = await asyncpg.connect(postgres_url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())


class TestPostgresKeepsTheContract(StorageSuite):
    @pytest.fixture
    def storage_url(self, kit_url: str) -> str:
        return kit_url

    @pytest_asyncio.fixture
    async def storage(self, kit_url: str) -> AsyncIterator[Storage]:
        async with PostgresStorage.from_url(kit_url) as store:
            await store.migrate()
            yield store
