"""Serves ``sqlite://`` (the scheme this package's entry point declares).

Kept light: the store (and sqlite3) are imported only when a store is built."""

from __future__ import annotations

from typing import Any

from rdq.spi import Storage, StorageFactory, hookimpl


def open_sqlite(url: str, **options: Any) -> Storage:
    """Build a (not yet connected) :class:`~rdq_sqlite.SqliteStorage` for ``url``."""
    from rdq_sqlite._store import SqliteStorage

    return SqliteStorage.from_url(url, **options)


@hookimpl
def rdq_storage_factory(scheme: str) -> StorageFactory:
    """Every scheme this package's entry points declare is served by :func:`open_sqlite`."""
    return open_sqlite
