"""rdq storage on PostgreSQL (asyncpg): the reference plugin.

Open it through rdq with a ``postgresql://`` URL (see ``docs/postgres.md`` for the options)::

    async with rdq.open_storage("postgresql://app@db/app?schema=rdq&pool_max=20") as storage:
        await storage.migrate()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["PostgresConfig", "PostgresStorage", "parse_url"]

if TYPE_CHECKING:
    from rdq_postgres._store import PostgresStorage
    from rdq_postgres._url import PostgresConfig, parse_url


def __getattr__(name: str) -> Any:
    # Lazy, so importing the package (plugin discovery) never imports asyncpg.
    if name == "PostgresStorage":
        from rdq_postgres._store import PostgresStorage

        return PostgresStorage
    if name in ("PostgresConfig", "parse_url"):
        from rdq_postgres import _url

        return getattr(_url, name)
    raise AttributeError(name)
