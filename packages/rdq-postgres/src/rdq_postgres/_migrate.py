"""Applies the numbered ``.sql`` migrations under an advisory lock."""

from __future__ import annotations

import zlib

import asyncpg

from rdq_postgres._queries import Queries, migrations

__all__ = ["apply_migrations", "lock_key"]


def lock_key(schema: str) -> int:
    """The advisory lock key serialising migrations of ``schema`` (a stable 31-bit number)."""
    return zlib.crc32(f"rdq.migrate.{schema}".encode()) & 0x7FFFFFFF


async def apply_migrations(conn: asyncpg.Connection, sql: Queries) -> list[str]:
    """Apply every migration not yet recorded in ``schema.schema_migrations``, each in its own
    transaction, while holding a session advisory lock (other migrators wait). Returns the
    migrations applied, named as their files are (``0003_second_revision``), in order; empty
    when the schema was up to date."""
    lock, unlock, record = sql.migrate_lock, sql.migrate_unlock, sql.migration_record
    key = lock_key(sql.schema)
    await conn.execute(lock.text, *lock.args({"key": key}))
    try:
        await conn.execute(sql.script("migrate_prepare"))
        done = {row["version"] for row in await conn.fetch(sql.migrations_applied.text)}
        applied = []
        for version, name, text in migrations(sql.schema, sql.channel):
            if version in done:
                continue
            async with conn.transaction():
                await conn.execute(text)
                await conn.execute(record.text, *record.args({"version": version, "name": name}))
            applied.append(f"{version:04d}_{name}")
        return applied
    finally:
        await conn.execute(unlock.text, *unlock.args({"key": key}))
