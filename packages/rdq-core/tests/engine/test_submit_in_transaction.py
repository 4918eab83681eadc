"""``Client.submit(..., connection=conn)``: tasks stored by the application's own transaction
(PostgreSQL), so a row of the application and its task commit or roll back together."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

import rdq
from rdq.app import DEFAULT_QUEUE
from rdq.errors import Unsupported
from rdq.spi import Status

from .conftest import fast_worker, running, wait_status

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def orders(postgres_url: str) -> AsyncIterator[tuple[asyncpg.Connection, str]]:
    """An application table of its own."""
    table = f"orders_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(postgres_url)
    await conn.execute(f"CREATE TABLE {table} (id text PRIMARY KEY)")
    try:
        yield conn, table
    finally:
        await conn.execute(f"DROP TABLE {table}")
        await conn.close()


async def test_a_committed_transaction_stores_its_tasks_and_they_run(postgres_url, orders):
    conn, table = orders
    queue = f"q-{uuid.uuid4().hex[:8]}"
    app = rdq.App()
    ran: list[str] = []

    @app.handler("ship", queue=queue)
    async def ship(payload: dict[str, str]) -> None:
        ran.append(payload["order"])

    async with rdq.open_storage(postgres_url) as storage:
        await storage.migrate()
        client = rdq.Client(storage, app)
        async with conn.transaction():
            await conn.execute(f"INSERT INTO {table} VALUES ('o-1')")
            one = await client.submit("ship", {"order": "o-1"}, connection=conn)
            many = await client.submit_many(
                [rdq.Submission("ship", {"order": f"o-{i}"}) for i in (2, 3)]
                + [rdq.Submission("ship", {"order": "o-4"}, delay=0.0)],
                connection=conn,
            )
            with pytest.raises(rdq.NotFound):  # not visible before the commit
                await client.get(one.id)
        async with running(fast_worker(app, storage)):
            for sub in [one, *many]:
                await wait_status(storage, sub.id, Status.SUCCEEDED)
    assert sorted(ran) == ["o-1", "o-2", "o-3", "o-4"]


async def test_a_rolled_back_transaction_leaves_no_task(postgres_url, orders):
    conn, table = orders
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with rdq.open_storage(postgres_url) as storage:
        await storage.migrate()
        client = rdq.Client(storage)
        tx = conn.transaction()
        await tx.start()
        await conn.execute(f"INSERT INTO {table} VALUES ('o-9')")
        sub = await client.submit("ship", {"order": "o-9"}, queue=queue, connection=conn)
        [other] = await client.submit_many(
            [rdq.Submission("ship", 1, queue=queue)], connection=conn
        )
        await tx.rollback()
        for task_id in (sub.id, other.id):
            with pytest.raises(rdq.NotFound):
                await client.get(task_id)
        assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 0


async def test_a_store_without_transactional_enqueue_refuses_a_connection():
    async with rdq.open_storage("memory://") as storage:
        client = rdq.Client(storage)
        with pytest.raises(Unsupported) as info:
            await client.submit("ship", None, connection=object())
        with pytest.raises(Unsupported):
            await client.submit_many([rdq.Submission("ship", None)], connection=object())
        assert (await storage.stats(DEFAULT_QUEUE)).pending == 0  # nothing stored
    assert info.value.capability == "transactional_enqueue"
    assert "transactional_enqueue" in str(info.value)
