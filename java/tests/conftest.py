"""Fixtures of the Java binding's tests: the build, one bridge server and one PostgreSQL server
for the whole session, and a schema per test module."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from rdq_java_bridge import BridgeServer, java_classpath

JAVA_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def java_build() -> str:
    """The Java binding's runtime classpath, building it first unless ``RDQ_JAVA_CLASSPATH``
    names a build (``nox -s java`` builds once, then runs these tests)."""
    if not os.environ.get("RDQ_JAVA_CLASSPATH"):
        subprocess.run([str(JAVA_DIR / "build.sh"), "--no-test"], check=True)
    return java_classpath()


@pytest.fixture(scope="session")
def bridge(java_build: str) -> Iterator[BridgeServer]:
    """One bridge server (one JVM) for the session; each store opens its own session on it."""
    with BridgeServer() as server:
        yield server


def drop_schema(postgres_url: str, schema: str) -> None:
    async def drop() -> None:
        conn = await asyncpg.connect(postgres_url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())


@pytest.fixture(scope="module")
def schema(postgres_url: str) -> Iterator[str]:
    """A PostgreSQL schema of this module's own (dropped afterwards)."""
    name = f"java_{secrets.token_hex(4)}"
    yield name
    drop_schema(postgres_url, name)


@pytest.fixture(scope="module")
def java_url(postgres_url: str, schema: str, bridge: BridgeServer) -> str:
    """The module's schema through the shared bridge: ``java+postgresql://...``."""
    return f"java+{postgres_url}?schema={schema}&bridge={bridge.socket}"


@pytest.fixture(scope="module")
def python_url(postgres_url: str, schema: str) -> str:
    """The same schema through rdq's Python plugin."""
    return f"{postgres_url}?schema={schema}"
