"""Serves ``postgresql://`` and ``postgres://``, the schemes this package's entry points declare.

Kept light: asyncpg is imported only when a store is built."""

from __future__ import annotations

from typing import Any

from rdq.spi import Storage, StorageFactory, hookimpl


def open_postgres(url: str, **options: Any) -> Storage:
    """Build a (not yet connected) :class:`~rdq_postgres.PostgresStorage` for ``url``."""
    from rdq_postgres._store import PostgresStorage

    return PostgresStorage.from_url(url, **options)


@hookimpl
def rdq_storage_factory(scheme: str) -> StorageFactory:
    """Every scheme this package's entry points declare is served by :func:`open_postgres`."""
    return open_postgres
