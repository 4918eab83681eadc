"""The store's lifecycle (``StorageBase``'s: NotConnected before connect and after aclose,
reopening works) and exactly what it advertises."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest

from rdq import open_storage
from rdq.errors import NotConnected
from rdq.spi import Envelope, Page, Storage
from rdq_redis import RedisConfig, RedisStorage
from rdq_redis._url import parse_url

from .test_kit import EXPECTED_CAPABILITIES

LEASE = timedelta(minutes=5)


def test_capabilities_are_exactly_what_the_store_offers() -> None:
    store = open_storage("redis://127.0.0.1:1/0")
    assert store.capabilities() == EXPECTED_CAPABILITIES


def test_the_config_is_public_and_frozen() -> None:
    config = parse_url("redis://h:1/2?prefix=p")
    assert isinstance(config, RedisConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.prefix = "other"  # type: ignore[misc]
    assert isinstance(RedisStorage(config), RedisStorage)


@pytest.mark.asyncio
async def test_operations_before_connect_raise_not_connected() -> None:
    store = open_storage("redis://127.0.0.1:1/0")  # nothing listens there: no I/O happens
    with pytest.raises(NotConnected, match="not connected"):
        await store.enqueue(Envelope(id="a", queue="q", handler_ref="h"))
    with pytest.raises(NotConnected):
        await store.claim_due("q", 1, LEASE)
    with pytest.raises(NotConnected):
        await store.migrate()
    with pytest.raises(NotConnected):
        await store.wait_due("q", 0.01)
    with pytest.raises(NotConnected):
        await store.dlq_list("q", None, Page())


@pytest.mark.asyncio
async def test_after_aclose_operations_raise_and_connect_reopens(storage_url: str) -> None:
    queue = f"q-{uuid.uuid4().hex[:8]}"
    store: Storage = open_storage(storage_url)
    async with store:
        await store.enqueue(Envelope(id=f"{queue}-1", queue=queue, handler_ref="h"))
        assert await store.wait_due(queue, 0.01) is True
    await store.aclose()  # idempotent
    with pytest.raises(NotConnected, match="closed") as info:
        await store.stats(queue)
    assert info.value.closed is True
    with pytest.raises(NotConnected):
        await store.get(f"{queue}-1")

    await store.connect()
    await store.connect()  # idempotent
    try:
        assert (await store.stats(queue)).pending == 1
        assert len(await store.claim_due(queue, 5, LEASE)) == 1
        assert await store.wait_due(queue, 0.01) is False
    finally:
        await store.aclose()
