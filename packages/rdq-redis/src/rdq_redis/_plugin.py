"""Serves ``redis://`` and ``rediss://``, the schemes this package's entry points declare (imports
no driver)."""

from __future__ import annotations

from typing import Any

from rdq.spi import Storage, StorageFactory, hookimpl


def open_redis(url: str, **options: Any) -> Storage:
    """A :class:`rdq_redis.RedisStorage` for ``url`` (not connected yet)."""
    from rdq_redis._store import RedisStorage

    return RedisStorage.from_url(url, **options)


@hookimpl
def rdq_storage_factory(scheme: str) -> StorageFactory:
    """Every scheme this package's entry points declare is served by :func:`open_redis`."""
    return open_redis
