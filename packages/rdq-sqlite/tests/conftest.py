"""Fixtures: a database file of its own for every test, and a connected store on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from rdq_sqlite import SqliteStorage


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return tmp_path / "rdq.db"


@pytest.fixture
def url(database: Path) -> str:
    return f"sqlite:///{database}"


@pytest_asyncio.fixture
async def store(url: str) -> AsyncIterator[SqliteStorage]:
    async with SqliteStorage.from_url(url) as opened:
        yield opened
