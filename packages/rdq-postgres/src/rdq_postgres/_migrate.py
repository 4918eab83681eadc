"""Applies the numbered ``.sql`` migrations under an advisory lock."""

from __future__ import annotations

import zlib

import asyncpg

from rdq_postgres._queries import _read, _render, migrations

__all__ = ["apply_migrations", "lock_key"]


def lock_key(schema: str) -> int:
    """The advisory lock key serialising migrations of ``schema`` (a stable 31-bit number)."""
    return zlib.crc32(f"rdq.migrate.{schema}".encode()) & 0x7FFFFFFF


async def apply_migrations(conn: asyncpg.Connection, schema: str, channel: str) -> list[str]:
    """Apply every migration not yet recorded in ``schema.schema_migrations``, each in its own
    transaction, while holding a session advisory lock (other migrators wait). Returns the
    migrations applied, named as their files are (``0003_second_revision``), in order; empty
    when the schema was up to date."""
    key = lock_key(schema)
    await conn.execute("SELECT pg_advisory_lock($1)", key)
    try:
        await conn.execute(_render(_read("migrate_prepare.sql"), schema, channel))
        done = {
            row["version"]
            for row in await conn.fetch(f'SELECT version FROM "{schema}".schema_migrations')
        }
        applied = []
        for version, name, sql in migrations(schema, channel):
            if version in done:
                continue
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute(
                    f'INSERT INTO "{schema}".schema_migrations (version, name) VALUES ($1, $2)',
                    version,
                    name,
                )
            applied.append(f"{version:04d}_{name}")
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", key)
