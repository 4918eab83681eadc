"""The whole compliance kit, unchanged, against the Java binding through the bridge.

Every clause runs on ``io.rdq.postgres.PostgresStorage``: the adapter forwards each call and
translates its answer, nothing more. The chaos test's worker processes reach the Java binding
through the same bridge server (``storage_url`` names its socket)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from rdq.spi import Storage
from rdq_compliance import StorageSuite
from rdq_java_bridge import JavaBridgeStorage


class TestJavaKeepsTheContract(StorageSuite):
    @pytest.fixture
    def storage_url(self, java_url: str) -> str:
        return java_url

    @pytest_asyncio.fixture
    async def storage(self, java_url: str) -> AsyncIterator[Storage]:
        async with JavaBridgeStorage.from_url(java_url) as store:
            await store.migrate()
            yield store
