"""PgQueuer through its documented API: ``Queries.enqueue`` (scalar or list arguments for a
batch) on an ``AsyncpgDriver``, and ``PgQueuer`` (its queue manager and scheduler, as
``pgq run`` starts them) with an ``entrypoint`` as the worker.

Settings are PgQueuer's defaults: durable (logged) tables, ``PgQueuer.run()`` with its
default ``batch_size=10`` and no ``max_concurrent_tasks`` cap, LISTEN/NOTIFY always on (PgQueuer
has no switch for it; its polling fallback is ``dequeue_timeout``, 30 s by default).

Completion records: PgQueuer deletes a finished job from its queue table and writes a
``successful`` row to its log table (``pgqueuer_log``); every enqueue writes a ``queued`` row.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg
from pgqueuer import AsyncpgDriver, PgQueuer
from pgqueuer.models import Job
from pgqueuer.queries import Queries

from bench.e2e.systems import TASK, BenchSystem, BenchWorker, VerificationError

__all__ = ["System", "Worker"]

_QUEUE_TABLE = "pgqueuer"
_LOG_TABLE = "pgqueuer_log"


def _encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


class System(BenchSystem):
    """Producer and admin side: one asyncpg connection, as PgQueuer's quick start does."""

    name = "pgqueuer"

    async def open(self, url: str) -> None:
        self._conn = await asyncpg.connect(url)
        self._queries = Queries(AsyncpgDriver(self._conn))
        await self._queries.install()

    async def reset(self) -> None:
        await self._conn.execute(f"TRUNCATE {_QUEUE_TABLE}, {_LOG_TABLE}")
        await self._queries.clear_statistics_log()

    async def enqueue_one(self, body: dict[str, Any]) -> None:
        await self._queries.enqueue(TASK, _encode(body))

    async def enqueue_many(self, bodies: Sequence[dict[str, Any]]) -> None:
        count = len(bodies)
        await self._queries.enqueue([TASK] * count, [_encode(b) for b in bodies], [0] * count)

    async def completed(self) -> int:
        value: int = await self._conn.fetchval(
            f"SELECT count(*) FROM {_LOG_TABLE} WHERE status = 'successful'"
        )
        return value

    async def db_now(self) -> datetime:
        value: datetime = await self._conn.fetchval("SELECT clock_timestamp()")
        return value

    async def last_completion(self) -> datetime | None:
        value: datetime | None = await self._conn.fetchval(
            f"SELECT max(created) FROM {_LOG_TABLE} WHERE status = 'successful'"
        )
        return value

    async def verify(self, expected: int) -> None:
        left = await self._conn.fetchval(f"SELECT count(*) FROM {_QUEUE_TABLE}")
        row = await self._conn.fetchrow(
            f"""
            SELECT count(DISTINCT job_id) FILTER (WHERE status = 'queued') AS queued,
                   count(*) FILTER (WHERE status = 'successful') AS successful,
                   count(DISTINCT job_id) FILTER (WHERE status = 'successful') AS distinct_ok,
                   count(*) FILTER (WHERE status NOT IN ('queued', 'picked', 'successful'))
                       AS other
            FROM {_LOG_TABLE}
            """
        )
        orphans = await self._conn.fetchval(
            f"""
            SELECT count(*) FROM {_LOG_TABLE} AS ok
            WHERE ok.status = 'successful' AND NOT EXISTS (
                SELECT 1 FROM {_LOG_TABLE} AS q WHERE q.job_id = ok.job_id AND q.status = 'queued')
            """
        )
        assert row is not None
        problems = []
        if left:
            problems.append(f"{left} jobs still in the queue table")
        if row["queued"] != expected:
            problems.append(f"{row['queued']} jobs queued, expected {expected}")
        if row["successful"] != expected or row["distinct_ok"] != expected:
            problems.append(
                f"{row['successful']} successful log rows for {row['distinct_ok']} jobs, "
                f"expected {expected} for {expected}"
            )
        if row["other"]:
            problems.append(f"{row['other']} log rows with a failure/cancel/delete status")
        if orphans:
            problems.append(f"{orphans} successful jobs that were never queued")
        if problems:
            raise VerificationError("pgqueuer: " + "; ".join(problems))

    async def unlogged_tables(self) -> list[str]:
        rows = await self._conn.fetch(
            "SELECT relname FROM pg_class WHERE relpersistence = 'u' AND relkind = 'r'"
        )
        return [r["relname"] for r in rows]

    async def close(self) -> None:
        await self._conn.close()


class Worker(BenchWorker):
    """One ``PgQueuer`` on one asyncpg connection with a no-op async entrypoint."""

    async def open(self) -> None:
        self._conn = await asyncpg.connect(self.url)
        self._pgq = PgQueuer.from_asyncpg_connection(self._conn)
        on_start = self.on_start

        @self._pgq.entrypoint(TASK)
        async def noop(job: Job) -> None:
            on_start(json.loads(job.payload or b"null"))

    async def run(self, stop: asyncio.Event) -> None:
        run = asyncio.create_task(self._pgq.run())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({run, stopping}, return_when=asyncio.FIRST_COMPLETED)
        self._pgq.shutdown.set()
        stopping.cancel()
        await run

    async def close(self) -> None:
        await self._conn.close()
