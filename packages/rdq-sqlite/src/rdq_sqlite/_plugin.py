"""Registers ``sqlite://`` with rdq's plugin manager.

Kept light: the store (and sqlite3) are imported only when a store is built."""

from __future__ import annotations

from typing import Any

from rdq.plugins import StorageRegistry, hookimpl
from rdq.spi import Storage


def open_sqlite(url: str, **options: Any) -> Storage:
    """Build a (not yet connected) :class:`~rdq_sqlite.SqliteStorage` for ``url``."""
    from rdq_sqlite._store import SqliteStorage

    return SqliteStorage.from_url(url, **options)


@hookimpl
def rdq_register_storage(registry: StorageRegistry) -> None:
    registry.add("sqlite", open_sqlite)
