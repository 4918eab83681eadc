"""Fixtures: a migrated PostgresStorage in a schema of its own for every test."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any, Protocol

import asyncpg
import pytest
import pytest_asyncio

from rdq_postgres import PostgresStorage


@pytest_asyncio.fixture
async def schema(postgres_url: str) -> AsyncIterator[str]:
    """A fresh schema name, dropped after the test."""
    name = f"t_{secrets.token_hex(6)}"
    yield name
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


@pytest_asyncio.fixture
async def storage(postgres_url: str, schema: str) -> AsyncIterator[PostgresStorage]:
    """A connected, migrated store in its own schema."""
    store = PostgresStorage.from_url(postgres_url, schema=schema)
    async with store:
        await store.migrate()
        yield store


class ClaimPlan(Protocol):
    """The fixture ``claim_plan`` (conftest.py)."""

    async def __call__(
        self,
        storage: PostgresStorage,
        queue: str,
        limit: int,
        on: asyncpg.Connection | None = None,
    ) -> list[dict[str, Any]]: ...


class _Rollback(Exception):
    """Ends the transaction of a plan with a rollback."""


@pytest.fixture
def claim_plan(postgres_url: str) -> ClaimPlan:
    """``await claim_plan(storage, queue, limit)``: the nodes of the plan (EXPLAIN ANALYZE,
    JSON) of the claim's statement as claim_due() runs it at every claim (its generic plan, as
    auto_explain logs it), in a transaction rolled back after. Raises what the claim raises.
    ``on``: a connection of the caller's, kept open (claim_due() keeps the plan it made on it
    at its first call); by default a new one."""

    async def plan(
        storage: PostgresStorage,
        queue: str,
        limit: int,
        on: asyncpg.Connection | None = None,
    ) -> list[dict[str, Any]]:
        claim = storage._sql.claim
        values = {"queue": queue, "limit": limit, "lease_us": 30_000_000, "worker_id": "w"}
        conn = on or await asyncpg.connect(postgres_url)
        logged: list[str] = []
        conn.add_log_listener(lambda _conn, message: logged.append(message.message))
        try:
            async with conn.transaction():  # the claim's locks go with the rollback
                await conn.execute("LOAD 'auto_explain'")
                for setting, value in {
                    "auto_explain.log_min_duration": "0",
                    "auto_explain.log_analyze": "on",
                    "auto_explain.log_buffers": "on",
                    "auto_explain.log_nested_statements": "on",
                    "auto_explain.log_format": "json",
                    "client_min_messages": "log",
                }.items():
                    await conn.execute(f"SET LOCAL {setting} = '{value}'")
                await conn.fetch(claim.text, *claim.args(values))
                raise _Rollback
        except _Rollback:
            pass
        finally:
            if on is None:
                await conn.close()
        plans = [json.loads(m.split("plan:", 1)[1]) for m in logged if "plan:" in m]
        nested = [p for p in plans if p["Query Text"].lstrip().startswith("WITH due")]
        assert len(nested) == 1, [p["Query Text"][:60] for p in plans]
        return _nodes(nested[0]["Plan"])

    return plan


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    """``node`` and every node under it."""
    found = [node]
    for child in node.get("Plans", []):
        found += _nodes(child)
    return found
