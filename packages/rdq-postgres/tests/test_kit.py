"""The whole compliance kit (chaos test included) against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
import pytest_asyncio

from rdq.spi import Capabilities, Storage
from rdq_compliance import CorruptTaskWriter, StorageSuite
from rdq_postgres import PostgresStorage
from rdq_postgres.testing import put_corrupt_task


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

    @pytest.fixture
    def corrupt_task(self, storage: Storage) -> CorruptTaskWriter:
        assert isinstance(storage, PostgresStorage)

        async def write(queue: str, task_id: str, kind: str = "undecodable") -> None:
            if kind == "far_time":
                pytest.skip(
                    "the schema refuses times outside the years 1-9999 (CHECK "
                    "task_time_range_check); tests/test_poison_rows.py covers such rows"
                )
            await put_corrupt_task(storage, queue, task_id, kind=kind)

        return write

    @pytest.fixture
    def expected_capabilities(self) -> Capabilities:
        return Capabilities(
            contract_version=5,
            notify=True,
            filter_pushdown=True,
            batch_enqueue=True,
            batch_complete=True,
            group_pushdown=True,
            priorities=True,
            claim_holder=True,
            cancel=True,
            task_listing=True,
            queue_listing=True,
            import_tasks=True,
            audit=True,
            control=True,
            worker_registry=True,
            counters=True,
            fair_shares=True,
            priority_aging=True,
            retention=True,
            dedup=True,
            payload_refs=True,
            discard_succeeded=True,
            reopen=True,
            transactional_enqueue=True,
        )
