"""Fixtures for the privacy tests: keyrings, and stores of every first-party backend."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

import rdq
from rdq.keys import Keyring
from rdq.spi import Storage

CARD = "4111 1111 1111 1111"
"""A card number (Visa's test number: it passes Luhn's check, as a real one does)."""


def keyring(*versions: str, active: str | None = None) -> Keyring:
    return Keyring({v: secrets.token_bytes(32) for v in versions}, active or versions[0])


@pytest.fixture
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["sqlite", "postgres", "redis", "mongo"])
def store_url(request: pytest.FixtureRequest) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{request.getfixturevalue('tmp_path')}/privacy.db"
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest_asyncio.fixture
async def store(store_url: str) -> AsyncIterator[Storage]:
    async with rdq.open_storage(store_url) as opened:
        await opened.migrate()
        yield opened
