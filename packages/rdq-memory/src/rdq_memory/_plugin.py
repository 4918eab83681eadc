"""Serves ``memory://`` (the scheme this package's entry point declares)."""

from __future__ import annotations

from typing import Any

from rdq.spi import Storage, StorageFactory, hookimpl


def open_memory(url: str, **options: Any) -> Storage:
    from rdq_memory._store import MemoryStorage

    return MemoryStorage.from_url(url, **options)


@hookimpl
def rdq_storage_factory(scheme: str) -> StorageFactory:
    """Every scheme this package's entry points declare is served by :func:`open_memory`."""
    return open_memory
