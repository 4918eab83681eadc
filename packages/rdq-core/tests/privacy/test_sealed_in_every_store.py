"""A card number submitted through the client is ciphertext in every store — read back raw,
the way someone holding the database would — runs correctly, and a worker without the key
makes the task wait (never lost, never dead-lettered for it)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import pytest

import rdq
from rdq.keys import ENCRYPTION_HEADER
from rdq.retry import PAYLOAD_KEY_UNAVAILABLE
from rdq.spi import Outcome, Status, Storage
from rdq_compliance.testing import eventually

from .conftest import CARD, keyring

DIGITS = CARD.replace(" ", "")


async def raw_records(url: str, task_id: str) -> list[str]:
    """Every stored record that mentions ``task_id``, as text, read past rdq: SQL rows, Redis
    values, Mongo documents, the SQLite file's bytes."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        path = url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            tables = [
                r[0] for r in conn.execute("select name from sqlite_master where type='table'")
            ]
            rows = [repr(row) for t in tables for row in conn.execute(f'select * from "{t}"')]
        files = [Path(p) for p in (path, path + "-wal")]
        blobs = [f.read_bytes().decode("latin-1") for f in files if f.exists()]
        return [r for r in rows if task_id in r] + blobs
    if scheme.startswith("postgres"):
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            tables = await conn.fetch(
                "select table_schema, table_name from information_schema.tables "
                "where table_schema not in ('pg_catalog', 'information_schema')"
            )
            found = []
            for t in tables:
                name = f'"{t["table_schema"]}"."{t["table_name"]}"'
                for row in await conn.fetch(f"select x::text as x from {name} x"):
                    if task_id in row["x"]:
                        found.append(row["x"])
            return found
        finally:
            await conn.close()
    if scheme.startswith("redis"):
        import redis.asyncio as redis

        client = redis.from_url(url)
        try:
            found = []
            async for key in client.scan_iter(count=1000):
                kind = (await client.type(key)).decode()
                value: Any
                if kind == "string":
                    value = await client.get(key)
                elif kind == "hash":
                    value = await client.hgetall(key)
                elif kind == "list":
                    value = await client.lrange(key, 0, -1)
                elif kind == "set":
                    value = await client.smembers(key)
                elif kind == "zset":
                    value = await client.zrange(key, 0, -1, withscores=True)
                elif kind == "stream":
                    value = await client.xrange(key)
                else:
                    continue
                text = f"{key!r} {value!r}"
                if task_id in text:
                    found.append(text)
            return found
        finally:
            await client.aclose()
    if scheme.startswith("mongodb"):
        from pymongo import AsyncMongoClient

        mongo: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
        try:
            found = []
            database = mongo[urlsplit(url).path.lstrip("/") or "rdq"]
            for name in await database.list_collection_names():
                async for doc in database[name].find({}):
                    text = repr(doc)
                    if task_id in text:
                        found.append(text)
            return found
        finally:
            await mongo.close()
    raise AssertionError(f"no raw reader for {url}")


@asynccontextmanager
async def working(worker: rdq.Worker) -> AsyncIterator[None]:
    task = asyncio.create_task(worker.run())
    try:
        yield
    finally:
        worker.stop()
        await asyncio.wait_for(task, 60)


@pytest.mark.asyncio
async def test_a_card_number_is_ciphertext_in_the_store_and_runs_in_clear(
    store: Storage, store_url: str, queue: str
) -> None:
    keys = keyring("v1")
    app = rdq.App()
    seen: list[Any] = []

    @app.handler("charge", queue=queue)
    async def charge(payload: dict[str, Any], ctx: rdq.TaskContext) -> None:
        seen.append((payload, dict(ctx.headers)))

    client = rdq.Client(store, app, keys=keys)
    submitted = await client.submit("charge", {"card": CARD, "amount": 1250})
    stored = await store.get(submitted.id)
    assert isinstance(stored.payload, str) and ENCRYPTION_HEADER in stored.headers
    raw = await raw_records(store_url, submitted.id)
    assert raw, "the raw reader found the task"
    assert any(stored.payload in r for r in raw), "the ciphertext is what is stored"
    for record in raw:
        assert CARD not in record and DIGITS not in record
        assert "amount" not in record  # the whole payload is sealed, not only the card

    async with working(rdq.Worker(app, store, keys=keys, poll_max=0.1, maintenance=False)):
        await eventually(lambda: _status(store, submitted.id, Status.SUCCEEDED), "succeeded", 30)
    assert seen == [({"card": CARD, "amount": 1250}, {})]
    for record in await raw_records(store_url, submitted.id):
        assert CARD not in record and DIGITS not in record


async def _status(store: Storage, task_id: str, status: Status) -> bool:
    return (await store.get(task_id)).status == status


@pytest.mark.asyncio
async def test_a_worker_without_the_key_makes_the_task_wait_uncharged(
    store: Storage, queue: str
) -> None:
    app = rdq.App()
    app.queue(queue, max_attempts=1)
    ran: list[Any] = []

    @app.handler("charge", queue=queue)
    async def charge(payload: Any) -> None:
        ran.append(payload)

    keys = keyring("v2", "v1")
    submitted = await rdq.Client(store, app, keys=keys).submit("charge", {"card": CARD})
    lacking = keyring("v1")  # the same name, but not the key that sealed it; no v2 at all
    for number, holds in enumerate((None, lacking), start=1):
        worker = rdq.Worker(app, store, keys=holds, poll_max=0.1, maintenance=False)
        async with working(worker):
            await eventually(
                lambda n=number: _attempts(store, submitted.id, n),  # type: ignore[misc]
                "an attempt",
                30,
            )
        task = await store.get(submitted.id)
        assert task.status == Status.PENDING  # waits: never dead-lettered for it
        last = task.attempts[-1]
        assert last.outcome == Outcome.DEFERRED and last.error_type == PAYLOAD_KEY_UNAVAILABLE
        assert "does not hold key 'v2'" in (last.error_message or "")
        assert CARD not in msgspec.json.encode(task).decode()
        assert ran == []
        assert task.next_attempt_at is not None
        await _due_now(store, queue, submitted.id)
    # with max_attempts=1, two uncharged waits later the task still runs once its key is there
    async with working(rdq.Worker(app, store, keys=keys, poll_max=0.1, maintenance=False)):
        await eventually(lambda: _status(store, submitted.id, Status.SUCCEEDED), "ran", 60)
    assert ran == [{"card": CARD}]


async def _attempts(store: Storage, task_id: str, count: int) -> bool:
    return len((await store.get(task_id)).attempts) >= count


async def _due_now(store: Storage, queue: str, task_id: str) -> None:
    """Make the waiting task due now (an operator's "retry now")."""
    assert await store.retry_now(queue, [task_id]) == 1
