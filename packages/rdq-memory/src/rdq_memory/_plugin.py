"""Registers ``memory://`` with rdq's plugin manager."""

from __future__ import annotations

from typing import Any

from rdq.plugins import StorageRegistry, hookimpl
from rdq.spi import Storage


def open_memory(url: str, **options: Any) -> Storage:
    from rdq_memory._store import MemoryStorage

    return MemoryStorage.from_url(url, **options)


@hookimpl
def rdq_register_storage(registry: StorageRegistry) -> None:
    registry.add("memory", open_memory)
