"""Fixtures of rdq-mongo's tests: a fresh database on the session's test server (a store in
it, also one whose commands are seen), and a view of when ``wait_due`` looks at its
queue."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import pytest_asyncio

from rdq_mongo import MongoStorage, _notify
from rdq_mongo.testing import Commands, put_corrupt_task


def with_database(url: str, database: str) -> str:
    """``url`` pointing at ``database`` (its path replaced), options kept."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


@pytest.fixture
def database_url(mongo_url: str) -> str:
    """A URL of a database no other test uses."""
    return with_database(mongo_url, f"rdq_test_{uuid.uuid4().hex[:12]}")


@pytest_asyncio.fixture
async def store(database_url: str) -> AsyncIterator[MongoStorage]:
    """A connected, migrated store in its own database, dropped afterwards."""
    storage = MongoStorage.from_url(database_url)
    async with storage:
        await storage.migrate()
        try:
            yield storage
        finally:
            await storage._connection().client.drop_database(storage.config.database)


@pytest_asyncio.fixture
async def watched(database_url: str) -> AsyncIterator[tuple[MongoStorage, Commands]]:
    """Like ``store``, with every command it sends seen by a :class:`Commands`."""
    commands = Commands()
    storage = MongoStorage.from_url(database_url, event_listeners=[commands])
    async with storage:
        await storage.migrate()
        try:
            yield storage, commands
        finally:
            await storage._connection().client.drop_database(storage.config.database)


CorruptWriter = Callable[..., Awaitable[None]]


@pytest.fixture
def write_corrupt(store: MongoStorage) -> CorruptWriter:
    """``await write_corrupt(queue, task_id, **fields)``: store, the way a hand edit or a
    buggy producer in another language would, a PENDING task of ``queue`` due a second ago
    by the server clock, whose stored ``fields`` (default: a body that is not JSON) replace
    those of an intact task (``rdq_mongo.testing.put_corrupt_task``)."""

    async def write(queue: str, task_id: str, **fields: Any) -> None:
        await put_corrupt_task(store, queue, task_id, fields or None)

    return write


class DueLooks:
    """Every look a ``wait_due`` of this process took at its queue
    (``rdq_mongo._notify.seconds_until_due``, wrapped): the seconds until its next task was
    due, as the server said (0 or less: due; None: nothing scheduled).

    With change streams the stream is open before the first look, so once a waiter has
    looked, a change can only reach it through the stream. Nothing in the contract says when
    that is; a test that must act only after it waits for a look here instead of sleeping."""

    def __init__(self) -> None:
        self.seen: list[float | None] = []

    async def nth(self, n: int, patience: float = 60.0) -> float | None:
        """The ``n``-th look (from 0), once it has happened."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + patience
        while len(self.seen) <= n:
            assert loop.time() < deadline, f"no wait_due looked at its queue in {patience:.0f}s"
            await asyncio.sleep(0.01)
        return self.seen[n]


@pytest.fixture
def due_looks(monkeypatch: pytest.MonkeyPatch) -> DueLooks:
    looks = DueLooks()
    real = _notify.seconds_until_due

    async def seconds_until_due(tasks: Any, queue: str) -> float | None:
        wait = await real(tasks, queue)
        looks.seen.append(wait)
        return wait

    monkeypatch.setattr(_notify, "seconds_until_due", seconds_until_due)
    return looks
