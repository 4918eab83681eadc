"""Registers ``mongodb://`` and ``mongodb+srv://`` with rdq's plugin manager.

Kept light: PyMongo is imported only when a store is opened.
"""

from __future__ import annotations

from typing import Any

from rdq.plugins import StorageRegistry, hookimpl
from rdq.spi import Storage


def open_mongo(url: str, **options: Any) -> Storage:
    """A ``MongoStorage`` for ``url`` (not connected yet); ``options`` go to PyMongo."""
    from rdq_mongo._store import MongoStorage

    return MongoStorage.from_url(url, **options)


@hookimpl
def rdq_register_storage(registry: StorageRegistry) -> None:
    registry.add("mongodb", open_mongo)
    registry.add("mongodb+srv", open_mongo)
