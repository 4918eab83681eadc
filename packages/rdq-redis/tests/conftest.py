"""Fixtures of the Redis plugin's tests: a session server (``redis_url`` from the kit's pytest
plugin) and, per test, a store under a key prefix of its own, so tests never see each other's
keys, the id index included."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from rdq import open_storage
from rdq.spi import Storage
from rdq_compliance.servers import ServerUnavailable, in_ci
from rdq_compliance.servers.redis import cluster_url


def with_prefix(url: str, prefix: str) -> str:
    """``url`` with rdq's ``prefix`` query option set."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["prefix"] = prefix
    return urlunsplit(parts._replace(query=urlencode(query)))


@pytest_asyncio.fixture
async def key_prefix(redis_url: str) -> AsyncIterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    prefix = f"rdqtest-{uuid.uuid4().hex[:12]}"
    yield prefix
    client = aioredis.Redis.from_url(redis_url)
    try:
        async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            await client.unlink(key)
    finally:
        await client.aclose()


@pytest.fixture
def redis_storage_url(redis_url: str, key_prefix: str) -> str:
    """A storage URL for this test's own key prefix (other processes can open it)."""
    return with_prefix(redis_url, key_prefix)


@pytest.fixture
def storage_url(redis_storage_url: str) -> str:
    return redis_storage_url


@pytest_asyncio.fixture
async def storage(storage_url: str) -> AsyncIterator[Storage]:
    async with open_storage(storage_url) as store:
        await store.migrate()
        yield store


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """URL (``cluster=true``) of a real Redis Cluster for this test session."""
    try:
        manager = cluster_url()
        url = manager.__enter__()
    except ServerUnavailable as exc:
        if in_ci():
            pytest.fail(f"no Redis Cluster (CI never skips a backend): {exc}", pytrace=False)
        pytest.skip(f"no Redis Cluster: {exc}")
    try:
        yield url
    finally:
        manager.__exit__(None, None, None)
