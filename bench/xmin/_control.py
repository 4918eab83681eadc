"""The size of rdq's control table (``rdq.control``, schema 5: one row per queue and key that
claims honour, a limit's among them), read before a phase's window and at its end: a queue
with a limit rewrites its control row at every claim, so under a held horizon each claim
leaves a row version VACUUM may not remove."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

__all__ = ["CONTROL", "ControlSize", "limit_row", "read", "report_lines"]

CONTROL = "rdq.control"

_SIZES = """
SELECT pg_relation_size($1::regclass) AS heap,
       pg_indexes_size($1::regclass) AS indexes,
       pg_total_relation_size($1::regclass) AS total,
       coalesce(s.n_live_tup, 0) AS live,
       coalesce(s.n_dead_tup, 0) AS dead
FROM (SELECT 1) AS one
LEFT JOIN pg_stat_user_tables AS s ON s.relid = $1::regclass
"""

_LIMIT = """
SELECT count(*) FROM rdq.control
WHERE queue = $1 AND (concurrency IS NOT NULL OR rate IS NOT NULL)
"""


@dataclass(frozen=True)
class ControlSize:
    """The control table's heap, indexes and total (with TOAST) in bytes, and its live and
    dead tuples as the statistics count them (reported by the backends at most once a
    second, so a reading lags by up to about that)."""

    heap: int
    indexes: int
    total: int
    live: int
    dead: int


async def read(db: asyncpg.Connection) -> ControlSize:
    """The control table's size now (fresh statistics)."""
    await db.execute("SELECT pg_stat_clear_snapshot()")
    row = await db.fetchrow(_SIZES, CONTROL)
    assert row is not None
    return ControlSize(
        int(row["heap"]), int(row["indexes"]), int(row["total"]), int(row["live"]), int(row["dead"])
    )


async def limit_row(db: asyncpg.Connection, queue: str) -> int:
    """How many control rows of ``queue`` hold a concurrency or rate limit."""
    return int(await db.fetchval(_LIMIT, queue))


def report_lines(phases: list[tuple[str, ControlSize, ControlSize]]) -> list[str]:
    """The control table before → at the end of each phase's window: heap, indexes and total
    in bytes, dead tuples."""
    lines = [
        f"{CONTROL}: {'phase':<8}{'heap B':>20}{'indexes B':>20}{'total B':>22}{'dead tuples':>18}"
    ]
    for name, before, after in phases:
        lines.append(
            f"{CONTROL}: {name:<8}"
            f"{_span(before.heap, after.heap):>20}{_span(before.indexes, after.indexes):>20}"
            f"{_span(before.total, after.total):>22}{_span(before.dead, after.dead):>18}"
        )
    return lines


def _span(before: int, after: int) -> str:
    return f"{before:,} → {after:,}"
