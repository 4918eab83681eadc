"""The whole compliance kit, unchanged, against the Java binding through the bridge.

Every clause runs on ``io.rdq.postgres.PostgresStorage``: the adapter forwards each call and
translates its answer, nothing more. The chaos test's worker processes reach the Java binding
through the same bridge server (``storage_url`` names its socket)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from rdq.spi import Capabilities, Storage
from rdq_compliance import StorageSuite
from rdq_compliance._fixtures import CorruptTaskWriter
from rdq_java_bridge import JavaBridgeStorage


class TestJavaKeepsTheContract(StorageSuite):
    @pytest.fixture
    def expected_capabilities(self) -> Capabilities:
        """What io.rdq.postgres.PostgresStorage advertises: the Python plugin's set but
        ``transactional_enqueue`` (the binding has no ``enqueueIn``); ``reopen`` is the
        bridge's (a second bridge session)."""
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
            control=True,
            worker_registry=True,
            counters=True,
            fair_shares=True,
            priority_aging=True,
            retention=True,
            dedup=True,
            payload_refs=True,
            discard_succeeded=True,
            reopen=True,
        )

    @pytest.fixture
    def corrupt_task(self, postgres_url: str, schema: str) -> CorruptTaskWriter:
        """Writes, with plain SQL, a PENDING task due a second ago whose headers hold a
        number and whose attempt record has no number and an unknown outcome (or, ``deep``,
        whose unknown field nests 5000 levels): a row that the schema's constraints accept
        and no reader can decode."""

        async def write(queue: str, task_id: str, kind: str = "undecodable") -> None:
            headers, attempts, extra = '{"n": 5}', '[{"outcome": "EXPLODED"}]', "{}"
            if kind == "deep":  # the binding hands payloads over raw; it decodes extra
                headers, attempts = "{}", "[]"
                extra = '{"x_new": ' + "[" * 5000 + "]" * 5000 + "}"
            elif kind == "far_time":
                pytest.skip(
                    "the schema refuses times outside the years 1-9999 (CHECK "
                    "task_time_range_check); test_schema_contract.py covers such rows"
                )
            conn = await asyncpg.connect(postgres_url)
            try:
                await conn.execute(
                    f'INSERT INTO "{schema}".task (id, queue, handler_ref, payload, headers, '
                    "status, attempts, extra, next_attempt_at) VALUES ($1, $2, "
                    """'kit.handlers:noop', '{"n": 1}', $3::json, 'PENDING', $4::json, """
                    "$5::json, now() - interval '1 second')",
                    task_id,
                    queue,
                    headers,
                    attempts,
                    extra,
                )
            finally:
                await conn.close()

        return write

    @pytest.fixture
    def storage_url(self, java_url: str) -> str:
        return java_url

    @pytest_asyncio.fixture
    async def storage(self, java_url: str) -> AsyncIterator[Storage]:
        async with JavaBridgeStorage.from_url(java_url) as store:
            await store.migrate()
            yield store
