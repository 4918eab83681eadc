"""Registers ``postgresql://`` and ``postgres://`` with rdq's plugin manager.

Kept light: asyncpg is imported only when a store is built."""

from __future__ import annotations

from typing import Any

from rdq.plugins import StorageRegistry, hookimpl
from rdq.spi import Storage


def open_postgres(url: str, **options: Any) -> Storage:
    """Build a (not yet connected) :class:`~rdq_postgres.PostgresStorage` for ``url``."""
    from rdq_postgres._store import PostgresStorage

    return PostgresStorage.from_url(url, **options)


@hookimpl
def rdq_register_storage(registry: StorageRegistry) -> None:
    registry.add("postgresql", open_postgres)
    registry.add("postgres", open_postgres)
