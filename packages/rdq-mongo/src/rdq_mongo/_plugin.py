"""Serves ``mongodb://`` and ``mongodb+srv://``, the schemes this package's entry points declare.

Kept light: PyMongo is imported only when a store is opened.
"""

from __future__ import annotations

from typing import Any

from rdq.spi import Storage, StorageFactory, hookimpl


def open_mongo(url: str, **options: Any) -> Storage:
    """A ``MongoStorage`` for ``url`` (not connected yet); ``options`` go to PyMongo."""
    from rdq_mongo._store import MongoStorage

    return MongoStorage.from_url(url, **options)


@hookimpl
def rdq_storage_factory(scheme: str) -> StorageFactory:
    """Every scheme this package's entry points declare is served by :func:`open_mongo`."""
    return open_mongo
