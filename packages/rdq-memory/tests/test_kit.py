"""The whole kit against the reference store: rdq-memory must pass every clause."""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from rdq import open_storage
from rdq.spi import Capabilities, Storage
from rdq_compliance import CorruptTaskWriter, StorageSuite
from rdq_memory import MemoryStorage
from rdq_memory.testing import put_corrupt_task


class TestMemoryStoreKeepsTheContract(StorageSuite):
    @pytest_asyncio.fixture
    async def storage(self) -> AsyncIterator[Storage]:
        async with open_storage("memory://") as store:
            await store.migrate()
            yield store

    @pytest.fixture
    def peer_storage_url(self) -> str:
        # a named memory store is shared by every store opened with its URL in this process
        return f"memory://kit-peers-{uuid.uuid4().hex}"

    @pytest.fixture
    def corrupt_task(self, storage: Storage) -> CorruptTaskWriter:
        assert isinstance(storage, MemoryStorage)
        return functools.partial(put_corrupt_task, storage)

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
            reopen=True,
            control=True,
            worker_registry=True,
            counters=True,
            fair_shares=True,
            priority_aging=True,
            retention=True,
            dedup=True,
            payload_refs=True,
            discard_succeeded=True,
        )
