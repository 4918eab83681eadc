"""``enqueue_in``: tasks admitted inside the application's own transaction — on an asyncpg
connection, a psycopg 3 connection, and SQLAlchemy's AsyncConnection and AsyncSession — exist
exactly when that transaction commits, together with the application's own rows."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import asyncpg
import psycopg
import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from rdq.errors import IDConflict, NotFound, ValidationError
from rdq.spi import Envelope, Status
from rdq_postgres import PostgresStorage


class Rollback(Exception):
    """Raised inside a transaction block to roll it back."""


Transaction = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


@contextlib.asynccontextmanager
async def _asyncpg(url: str) -> AsyncIterator[Transaction]:
    conn = await asyncpg.connect(url)

    @contextlib.asynccontextmanager
    async def transaction() -> AsyncIterator[Any]:
        async with conn.transaction():
            yield conn

    try:
        yield transaction
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def _psycopg(url: str) -> AsyncIterator[Transaction]:
    conn = await psycopg.AsyncConnection.connect(url)

    @contextlib.asynccontextmanager
    async def transaction() -> AsyncIterator[Any]:
        async with conn.transaction():
            yield conn

    try:
        yield transaction
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def _sqlalchemy_connection(url: str) -> AsyncIterator[Transaction]:
    engine = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://", 1))

    @contextlib.asynccontextmanager
    async def transaction() -> AsyncIterator[Any]:
        async with engine.begin() as conn:
            yield conn

    try:
        yield transaction
    finally:
        await engine.dispose()


@contextlib.asynccontextmanager
async def _sqlalchemy_session(url: str) -> AsyncIterator[Transaction]:
    engine = create_async_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))

    @contextlib.asynccontextmanager
    async def transaction() -> AsyncIterator[Any]:
        async with AsyncSession(engine) as session, session.begin():
            yield session

    try:
        yield transaction
    finally:
        await engine.dispose()


DRIVERS = {
    "asyncpg": _asyncpg,
    "psycopg": _psycopg,
    "sqlalchemy-asyncpg-connection": _sqlalchemy_connection,
    "sqlalchemy-psycopg-session": _sqlalchemy_session,
}


@pytest_asyncio.fixture(params=list(DRIVERS))
async def transaction(
    request: pytest.FixtureRequest, postgres_url: str, storage: PostgresStorage
) -> AsyncIterator[Transaction]:
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute(f'CREATE TABLE "{storage.config.schema}".orders (id text PRIMARY KEY)')
    finally:
        await conn.close()
    async with DRIVERS[request.param](postgres_url) as begin:
        yield begin


async def _insert_order(conn: Any, schema: str, order_id: str) -> None:
    """The application's own write, through its own driver."""
    statement = f'INSERT INTO "{schema}".orders (id) VALUES '
    if isinstance(conn, asyncpg.Connection):
        await conn.execute(statement + "($1)", order_id)
    elif isinstance(conn, psycopg.AsyncConnection):
        await conn.execute(statement + "(%s)", (order_id,))
    else:
        await conn.execute(text(statement + "(:id)"), {"id": order_id})


@contextlib.asynccontextmanager
async def _listening(url: str, channel: str) -> AsyncIterator[list[str]]:
    """The payloads of the NOTIFYs on ``channel``, in the order they arrive."""
    heard: list[str] = []
    conn = await asyncpg.connect(url)
    try:
        await conn.add_listener(channel, lambda *args: heard.append(str(args[-1])))
        yield heard
    finally:
        await conn.close()


async def _heard(heard: list[str], payload: str) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while payload not in heard:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no NOTIFY for {payload!r} within 30 s (heard {heard})")
        await asyncio.sleep(0.01)


async def _orders(storage: PostgresStorage) -> list[str]:
    async with storage._db.pool.connection() as conn:
        rows = await conn.fetch(f'SELECT id FROM "{storage.config.schema}".orders ORDER BY id')
    return [row["id"] for row in rows]


def _task(task_id: str, queue: str = "mail", **fields: Any) -> Envelope:
    return Envelope(id=task_id, queue=queue, handler_ref="app:send", payload={"n": 1}, **fields)


@pytest.mark.asyncio
async def test_commit_stores_the_tasks_with_the_applications_rows_and_wakes_workers(
    storage: PostgresStorage, transaction: Transaction, postgres_url: str
) -> None:
    schema = storage.config.schema
    assert await storage.wait_due("mail", 0.01) is False  # the LISTEN connection is up
    waiter = asyncio.create_task(storage.wait_due("mail", 60))
    async with _listening(postgres_url, storage.config.channel) as heard:
        async with transaction() as conn:
            await _insert_order(conn, schema, "order-1")
            flags = await storage.enqueue_in(conn, [_task("t-1", priority=4)], delay=timedelta(0))
            assert flags == [True]
            with pytest.raises(NotFound):  # not visible outside the transaction before commit
                await storage.get("t-1")
            # a task enqueued now is announced after anything the store announced so far:
            # once its NOTIFY is heard, a NOTIFY for "mail" sent before commit would have been
            await storage.enqueue(_task("after", queue="probe"))
            await _heard(heard, "probe")
            assert "mail" not in heard, "the NOTIFY is delivered on commit, not before"
            assert not waiter.done()
        await _heard(heard, "mail")
    assert await asyncio.wait_for(waiter, 30) is True
    task = await storage.get("t-1")
    assert (task.status, task.priority, task.payload) == (Status.PENDING, 4, {"n": 1})
    assert await _orders(storage) == ["order-1"]
    [claimed] = await storage.claim_due("mail", 10, timedelta(seconds=30))
    assert claimed.task.id == "t-1"


@pytest.mark.asyncio
async def test_rollback_stores_nothing(storage: PostgresStorage, transaction: Transaction) -> None:
    async def rolled_back() -> None:
        async with transaction() as conn:
            await _insert_order(conn, storage.config.schema, "order-2")
            assert await storage.enqueue_in(conn, [_task("t-2"), _task("t-3")]) == [True, True]
            raise Rollback

    with pytest.raises(Rollback):
        await rolled_back()
    for task_id in ("t-2", "t-3"):
        with pytest.raises(NotFound):
            await storage.get(task_id)
    assert await _orders(storage) == []
    assert await storage.claim_due("mail", 10, timedelta(seconds=30)) == []


@pytest.mark.asyncio
async def test_many_tasks_in_one_transaction(
    storage: PostgresStorage, transaction: Transaction
) -> None:
    await storage.enqueue(_task("already"))
    async with transaction() as conn:
        first = [_task(f"m-{n}", queue=("a", "b")[n % 2]) for n in range(60)]
        assert await storage.enqueue_in(conn, first, delay=timedelta(hours=1)) == [True] * 60
        again = [_task("m-0", queue="a"), _task("m-60", queue="a"), _task("already")]
        assert await storage.enqueue_in(conn, again) == [False, True, False]
        await _insert_order(conn, storage.config.schema, "order-3")
    assert (await storage.stats("a")).pending == 31
    assert (await storage.stats("b")).pending == 30
    delayed = await storage.get("m-1")
    assert delayed.next_attempt_at is not None and delayed.created_at is not None
    assert delayed.next_attempt_at - delayed.created_at == timedelta(hours=1)


@pytest.mark.asyncio
async def test_an_id_of_another_queue_stores_nothing_of_that_call_and_keeps_the_transaction(
    storage: PostgresStorage, transaction: Transaction
) -> None:
    await storage.enqueue(_task("taken", queue="elsewhere"))
    async with transaction() as conn:
        assert await storage.enqueue_in(conn, [_task("kept")]) == [True]
        with pytest.raises(IDConflict) as conflict:
            await storage.enqueue_in(conn, [_task("dropped"), _task("taken")])
        assert (conflict.value.task_id, conflict.value.existing_queue) == ("taken", "elsewhere")
        await _insert_order(conn, storage.config.schema, "order-4")  # still usable
    assert (await storage.get("kept")).status == Status.PENDING
    with pytest.raises(NotFound):
        await storage.get("dropped")
    assert (await storage.get("taken")).queue == "elsewhere"
    assert await _orders(storage) == ["order-4"]


@pytest.mark.asyncio
async def test_bad_input_is_refused_before_anything_runs(
    storage: PostgresStorage, transaction: Transaction
) -> None:
    async with transaction() as conn:
        with pytest.raises(ValidationError) as bad:
            await storage.enqueue_in(conn, [_task("ok"), _task("bad id")])
        assert bad.value.field == "id"
        with pytest.raises(ValidationError) as bad:
            await storage.enqueue_in(conn, [_task("ok")], delay=timedelta(seconds=-1))
        assert bad.value.field == "delay"
        await _insert_order(conn, storage.config.schema, "order-5")
    with pytest.raises(NotFound):
        await storage.get("ok")


@pytest.mark.asyncio
async def test_something_that_is_not_a_connection_is_refused(storage: PostgresStorage) -> None:
    with pytest.raises(ValidationError) as bad:
        await storage.enqueue_in(object(), [_task("x")])
    assert bad.value.field == "connection"
