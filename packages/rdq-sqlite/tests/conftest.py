"""Fixtures: a database file of its own for every test, a connected store on it, and a view
of when ``wait_due`` looks at its queue."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from rdq_sqlite import SqliteStorage, _notify


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


class DueLooks:
    """Every look a ``wait_due`` of this process took at its queue (``_notify.next_due``,
    wrapped): the store's time and the earliest due time it saw, in microseconds.

    Nothing in the contract says when a waiter has looked and started waiting; a test that
    must act only after that point (so that only the wake-up under test can end the wait)
    waits for a look here instead of sleeping and hoping."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int | None]] = []

    async def nth(self, n: int, patience: float = 60.0) -> tuple[int, int | None]:
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
    real = _notify.next_due

    def next_due(conn: sqlite3.Connection, queue: str) -> tuple[int, int | None, int]:
        now, due, version = real(conn, queue)
        looks.seen.append((now, due))
        return now, due, version

    monkeypatch.setattr(_notify, "next_due", next_due)
    return looks
