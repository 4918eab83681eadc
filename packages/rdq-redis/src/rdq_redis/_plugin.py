"""Registers ``redis://`` and ``rediss://`` with rdq's plugin manager (imports no driver)."""

from __future__ import annotations

from typing import Any

from rdq.plugins import StorageRegistry, hookimpl
from rdq.spi import Storage


def open_redis(url: str, **options: Any) -> Storage:
    """A :class:`rdq_redis.RedisStorage` for ``url`` (not connected yet)."""
    from rdq_redis._store import RedisStorage

    return RedisStorage.from_url(url, **options)


@hookimpl
def rdq_register_storage(registry: StorageRegistry) -> None:
    registry.add("redis", open_redis)
    registry.add("rediss", open_redis)
