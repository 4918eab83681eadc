"""What leaves the SQLite store: ``expire_tasks``, the retention step, one ``DELETE`` of the
listed finished tasks whose status time is before the cut-off, inside one write transaction
(the engine archived those tasks first); and ``held_payload_refs``, the payload references the
tasks left hold, read from the index of migration 5 on the read link."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from rdq_sqlite._codec import ids_param
from rdq_sqlite._queries import SQL

__all__ = ["expire_tasks", "held_payload_refs"]


def expire_tasks(conn: sqlite3.Connection, queue: str, ids: Sequence[str], before_us: int) -> int:
    """How many of the listed tasks were deleted (run on the write link)."""
    cursor = conn.execute(
        SQL.expire_tasks, {"queue": queue, "ids": ids_param(ids), "before": before_us}
    )
    return cursor.rowcount


def held_payload_refs(conn: sqlite3.Connection, refs: Sequence[str]) -> set[str]:
    """The references among ``refs`` some task carries (run on the read link)."""
    rows = conn.execute(SQL.held_payload_refs, {"refs": ids_param(refs)}).fetchall()
    return {row[0] for row in rows}
