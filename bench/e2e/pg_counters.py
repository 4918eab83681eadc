"""What a drain costs PostgreSQL beside its rate: WAL bytes and commits per task, and the rows
a system leaves behind.

- **WAL**: ``pg_current_wal_lsn()`` just before the workers are told to go and again once the
  last completion is seen; ``pg_wal_lsn_diff`` of the two. The LSN is the cluster's, so it
  holds whatever else wrote WAL in that window (an autovacuum, a checkpoint's full-page
  images): the harness settles the server before each drain and runs one system at a time.
- **Commits**: ``pg_stat_database.xact_commit`` of the system's database, read from the
  admin database with a fresh snapshot (``pg_stat_clear_snapshot()``). PostgreSQL 15+ counts
  a backend's transactions in shared memory when the backend goes idle, at most once a
  second, else within ``PGSTAT_IDLE_INTERVAL`` (10 s) or when it exits. So the first reading
  is taken once the enqueue's connections and the ready workers' have been idle that long
  (the workers' setup is not the drain's), and the second after the
  worker processes have exited (their backends report as they end) and the harness's own
  connections have been idle that long; the harness's own reads during the drain (its
  completion polls: one autocommit statement each, two for procrastinate's pool, which checks
  a connection first) are counted and subtracted. Read-only
  transactions count too (a claim that finds nothing is a commit).
- **Rows left**: the exact row count of every table of the system's database that has rows,
  and for rdq's task table the count per status.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import asyncpg

__all__ = [
    "STATS_FLUSH_SECONDS",
    "Counters",
    "DrainCost",
    "cost",
    "lsn_bytes",
    "read_counters",
    "rows_left",
    "wait_for_stats",
]

STATS_FLUSH_SECONDS = 11.0
"""How long a backend may hold transaction counts it has not reported yet (PostgreSQL's
``PGSTAT_IDLE_INTERVAL``, 10 s, plus a margin)."""


def lsn_bytes(lsn: str) -> int:
    """The byte position of a ``pg_lsn`` text (``16/B374D848``)."""
    high, _, low = lsn.partition("/")
    if not low:
        raise ValueError(f"not an LSN: {lsn!r}")
    return (int(high, 16) << 32) | int(low, 16)


@dataclass(frozen=True)
class Counters:
    """One reading: the cluster's WAL position and the database's committed transactions;
    ``wal_since``: the server's ``pg_wal_lsn_diff`` from an earlier reading's position."""

    lsn: str
    commits: int
    wal_since: int | None = None


@dataclass(frozen=True)
class DrainCost:
    """What one drain of ``tasks`` tasks wrote and committed."""

    tasks: int
    wal_bytes: int
    commits: int
    harness_reads: int
    """The harness's own statements on the system's database in the window, already taken
    out of ``commits``."""

    @property
    def wal_per_task(self) -> float:
        return self.wal_bytes / self.tasks

    @property
    def commits_per_task(self) -> float:
        return self.commits / self.tasks


def cost(
    before: Counters, wal_end: Counters, commits_end: Counters, tasks: int, harness_reads: int
) -> DrainCost:
    """The drain's cost from its readings: WAL up to ``wal_end``, commits up to
    ``commits_end`` less the harness's own reads."""
    if tasks <= 0:
        raise ValueError("a drain of no task has no cost per task")
    wal = wal_end.wal_since
    if wal is None:
        wal = lsn_bytes(wal_end.lsn) - lsn_bytes(before.lsn)
    commits = commits_end.commits - before.commits - harness_reads
    if wal < 0 or commits < 0:
        raise ValueError(f"counters went backwards: {wal} WAL bytes, {commits} commits")
    return DrainCost(tasks, wal, commits, harness_reads)


_READ = """
SELECT pg_current_wal_lsn()::text AS lsn,
       pg_wal_lsn_diff(pg_current_wal_lsn(), $2::text::pg_lsn)::bigint AS wal_since,
       (SELECT xact_commit FROM pg_stat_database WHERE datname = $1) AS commits
"""


async def read_counters(admin_url: str, database: str, since: Counters | None = None) -> Counters:
    """The WAL position (text, as ``pg_current_wal_lsn()`` gives it; with ``since``, also
    ``pg_wal_lsn_diff`` from its position) and the database's ``xact_commit``, read fresh on a
    connection to the admin database (so the reading does not count itself)."""
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        row = await conn.fetchrow(_READ, database, since.lsn if since is not None else None)
    finally:
        await conn.close()
    assert row is not None
    if row["commits"] is None:
        raise RuntimeError(f"no database {database!r} in pg_stat_database")
    wal_since = None if row["wal_since"] is None else int(row["wal_since"])
    return Counters(row["lsn"], int(row["commits"]), wal_since)


async def wait_for_stats(since: float, seconds: float = STATS_FLUSH_SECONDS) -> None:
    """Sleep until ``seconds`` have passed since the monotonic time ``since`` (the last
    statement of a connection whose counts must be in)."""
    remaining = since + seconds - time.monotonic()
    if remaining > 0:
        await asyncio.sleep(remaining)


_TABLES = """
SELECT format('%I.%I', n.nspname, c.relname) AS name
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
ORDER BY 1
"""

_RDQ_STATUSES = """
SELECT status::text AS status, count(*) AS n FROM rdq.task GROUP BY status ORDER BY status
"""


async def rows_left(database_url: str) -> dict[str, int]:
    """The exact row count of each table of the database that has rows (``schema.table``),
    and of rdq's task table one entry per status (``rdq.task[SUCCEEDED]``)."""
    conn = await asyncpg.connect(database_url)
    try:
        counts: dict[str, int] = {}
        for record in await conn.fetch(_TABLES):
            name = record["name"]
            n = int(await conn.fetchval(f"SELECT count(*) FROM {name}"))
            if n:
                counts[name] = n
            if name == "rdq.task" and n:
                for row in await conn.fetch(_RDQ_STATUSES):
                    counts[f"rdq.task[{row['status']}]"] = int(row["n"])
        return counts
    finally:
        await conn.close()
