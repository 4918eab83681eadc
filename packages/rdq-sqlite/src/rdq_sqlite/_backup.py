"""``backup(target)``: a consistent copy of the database in one file, taken while it serves.

The copy is written with ``VACUUM INTO``, which reads the whole database inside one read
transaction: in WAL mode that transaction never waits for the writers and is never made to
wait by them, so the copy finishes under sustained writes and holds exactly what was
committed when it began (every task acknowledged before the call). SQLite's online backup API
(``sqlite3 rdq.db ".backup …"``) instead restarts whenever another connection writes, and may
never finish beside busy workers; copying ``rdq.db`` alone misses what is still in
``rdq.db-wal``.

The copy goes to ``<target>.partial`` first and is checked there, on a connection of its own
that opens it read-only: ``PRAGMA integrity_check`` must answer ``ok`` and its schema version
must be the source's. Only then is it flushed to disk (``VACUUM INTO`` does not sync the file
it writes) and put at ``target``; a copy that fails a check is deleted.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from rdq.errors import StorageError, ValidationError
from rdq_sqlite._migrate import schema_version
from rdq_sqlite._queries import SQL

__all__ = ["check_target", "partial_of", "place", "verify", "write_copy"]


def partial_of(target: Path) -> Path:
    """Where the copy of ``target`` is written and checked before it is put in place."""
    return target.with_name(target.name + ".partial")


def check_target(name: str, database: str | None, overwrite: bool) -> Path:
    """The absolute path of the file ``name`` (relative to the working directory);
    ``ValidationError`` (field ``target``) unless a copy may be written there: its directory
    exists, it is not the database itself or one of its files, and it does not exist yet (or
    ``overwrite`` allows replacing it)."""
    target = Path(os.path.abspath(name))
    if not target.parent.is_dir():
        raise ValidationError(f"the directory {target.parent} does not exist", field="target")
    if target.is_dir():
        raise ValidationError(f"{target} is a directory; name a file", field="target")
    if database is not None:
        live = {Path(database + suffix).resolve() for suffix in ("", "-wal", "-shm", "-journal")}
        if target.resolve() in live or partial_of(target).resolve() in live:
            raise ValidationError(
                f"{target} is the database itself (or one of its files); name another file",
                field="target",
            )
    if target.exists() and not overwrite:
        raise ValidationError(
            f"{target} already exists; remove it, or replace it (rdq backup --force)",
            field="target",
        )
    return target


def write_copy(conn: sqlite3.Connection, partial: Path) -> int:
    """On the source's connection: write the copy to ``partial`` (an earlier, interrupted
    copy there is removed first) and return the source's schema version, read in the same
    snapshot's terms (the schema changes only by migration)."""
    partial.unlink(missing_ok=True)
    version = schema_version(conn)
    conn.execute(SQL.backup_write, {"target": str(partial)})
    return version


def verify(partial: Path, version: int) -> tuple[dict[str, int], list[str]]:
    """Check the copy at ``partial``; its task counts per status and the checks it passed.
    ``StorageError`` (the copy deleted) when one fails."""
    try:
        conn = sqlite3.connect(f"{partial.as_uri()}?mode=ro", uri=True, isolation_level=None)
        try:
            integrity = [row[0] for row in conn.execute("PRAGMA integrity_check")]
            copied_version = schema_version(conn)
            tasks: dict[str, int] = dict(conn.execute(SQL.task_statuses))
        finally:
            conn.close()
    except sqlite3.Error as exc:
        partial.unlink(missing_ok=True)
        raise StorageError(f"the backup {partial} cannot be read back: {exc}") from exc
    problems = []
    if integrity != ["ok"]:
        problems.append("integrity_check answered " + "; ".join(integrity[:5]))
    if copied_version != version:
        problems.append(f"its schema version is {copied_version}, the database's {version}")
    if problems:
        partial.unlink(missing_ok=True)
        raise StorageError(f"the backup failed its checks (deleted): {'; '.join(problems)}")
    return tasks, ["integrity_check: ok", f"schema version: {version}"]


def place(partial: Path, target: Path, overwrite: bool) -> int:
    """Flush the checked copy to disk and put it at ``target`` (replacing a file there only
    when ``overwrite``); its size in bytes."""
    with partial.open("rb+") as handle:
        os.fsync(handle.fileno())
    size = partial.stat().st_size
    try:
        if overwrite:
            os.replace(partial, target)
        else:
            _link(partial, target)
    except FileExistsError:
        partial.unlink(missing_ok=True)
        raise ValidationError(
            f"{target} appeared while the backup was written; nothing was replaced",
            field="target",
        ) from None
    _sync_directory(target.parent)
    return size


def _link(partial: Path, target: Path) -> None:
    """Move ``partial`` to ``target`` unless ``target`` exists (``FileExistsError``)."""
    try:
        os.link(partial, target)  # fails, replacing nothing, if target appeared meanwhile
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: check, then rename
        if target.exists():
            raise FileExistsError(target) from None
        os.replace(partial, target)
        return
    partial.unlink()


def _sync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform opens a directory
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
