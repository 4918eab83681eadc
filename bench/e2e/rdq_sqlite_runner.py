"""rdq on SQLite (``rdq-sqlite``): the same producer and worker as ``rdq_runner``, on a
database file of its own instead of the PostgreSQL cluster.

The file lives in a temporary directory made when the system opens (on the machine's local
disk, where SQLite belongs); the store's defaults apply (WAL, ``synchronous=FULL``, so every
acknowledged write is as durable as the PostgreSQL systems' are). Admin work (reset, the
completion records, the verification) reads the documented table with ``sqlite3``, as the
PostgreSQL runner does with SQL. Before each phase the write-ahead log is checkpointed, so one
phase's leftovers do not land in the next one's figure.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.e2e import rdq_runner
from bench.e2e.systems import QUEUE, VerificationError

__all__ = ["System", "Worker"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class System(rdq_runner.System):
    """The rdq producer on a SQLite file; admin SQL through ``sqlite3``."""

    name = "rdq_sqlite"

    def store_url(self, database_url: str) -> str:
        directory = Path(tempfile.mkdtemp(prefix="rdq-bench-sqlite-"))
        self._path = directory / "rdq.db"
        return f"sqlite:///{self._path}"

    async def _sql(self, statement: str, *params: Any) -> Any:
        def run() -> Any:
            conn = sqlite3.connect(self._path, timeout=60, isolation_level=None)
            try:
                return conn.execute(statement, params).fetchone()
            finally:
                conn.close()

        return await asyncio.to_thread(run)

    async def reset(self) -> None:
        self._ids = []
        await self._sql("DELETE FROM task")

    async def settle(self) -> None:
        await self._sql("PRAGMA wal_checkpoint(TRUNCATE)")

    async def db_now(self) -> datetime | None:
        return datetime.now(UTC)  # the store's clock is this host's

    async def last_completion(self) -> datetime | None:
        (micros,) = await self._sql(
            "SELECT max(completed_at) FROM task WHERE queue = ? AND status = 'SUCCEEDED'", QUEUE
        )
        return None if micros is None else _EPOCH + timedelta(microseconds=micros)

    async def verify(self, expected: int) -> None:
        if len(self._ids) != expected or len(set(self._ids)) != expected:
            raise VerificationError(f"rdq_sqlite: {len(set(self._ids))} distinct ids submitted")
        total, once = await self._sql(
            """
            SELECT count(*),
                   count(*) FILTER (
                       WHERE status = 'SUCCEEDED' AND attempt_count = 1
                         AND json_array_length(attempts) = 1
                         AND json_extract(attempts, '$[0].outcome') = 'SUCCEEDED'
                         AND json_extract(attempts, '$[0].number') = 1
                   )
            FROM task WHERE queue = ?
            """,
            QUEUE,
        )
        if not total == once == expected:
            raise VerificationError(
                f"rdq_sqlite: {once} of {total} tasks SUCCEEDED with exactly one SUCCEEDED "
                f"attempt, expected {expected}"
            )


Worker = rdq_runner.Worker
