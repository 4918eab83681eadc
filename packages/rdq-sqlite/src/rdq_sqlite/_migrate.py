"""Schema creation, upgrade and the version check.

The schema's version is SQLite's ``user_version`` (in the file's header, written in the same
transaction as the migration). Migrations run inside one ``BEGIN IMMEDIATE`` transaction, so
several processes migrating at once apply each migration exactly once.
"""

from __future__ import annotations

import sqlite3

from rdq.errors import StorageError
from rdq_sqlite._queries import migrations

__all__ = ["LATEST", "apply_migrations", "check_version", "create_if_empty", "schema_version"]

LATEST = migrations()[-1][0]
"""The schema version this release writes and reads."""


def schema_version(conn: sqlite3.Connection) -> int:
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return version


def _statements(script: str) -> list[str]:
    """``script`` cut into complete statements (``executescript`` would commit first)."""
    out: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            if pending.strip():
                out.append(pending)
            pending = ""
    if pending.strip() and not all(
        row.strip().startswith("--") or not row.strip() for row in pending.splitlines()
    ):
        out.append(pending)
    return out


def _refuse_newer(version: int, where: str) -> None:
    if version > LATEST:
        raise StorageError(
            f"SQLite database {where} has schema version {version}, newer than this "
            f"rdq-sqlite knows ({LATEST}): upgrade rdq-sqlite"
        )


def apply_migrations(conn: sqlite3.Connection, where: str) -> list[str]:
    """Inside a write transaction: apply every migration above the database's version and
    return those applied, named as their files are (``0001_schema``), in order (empty when
    it was up to date)."""
    version = schema_version(conn)
    _refuse_newer(version, where)
    applied = []
    for number, name, script in migrations():
        if number <= version:
            continue
        for statement in _statements(script):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
        applied.append(f"{number:04d}_{name}")
    return applied


def create_if_empty(conn: sqlite3.Connection, where: str) -> bool:
    """Inside a write transaction: create the schema if the database holds nothing at all
    (a new file); True if it did. An older rdq schema is upgraded only by ``migrate``."""
    if schema_version(conn) != 0:
        return False
    if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
        return False
    apply_migrations(conn, where)
    return True


def check_version(conn: sqlite3.Connection, where: str) -> None:
    """Raise ``StorageError`` unless the database's schema is the one this release uses."""
    version = schema_version(conn)
    _refuse_newer(version, where)
    if version < LATEST:
        state = "has no rdq schema" if version == 0 else f"has schema version {version}"
        raise StorageError(
            f"SQLite database {where} {state}; this rdq-sqlite needs version {LATEST}: run "
            "`rdq migrate --storage URL` (or storage.migrate())"
        )
