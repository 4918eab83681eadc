"""Fixtures of rdq-mongo's tests: a fresh database on the session's test server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import pytest
import pytest_asyncio

from rdq_mongo import MongoStorage


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
