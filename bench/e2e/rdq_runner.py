"""rdq through its public API: ``rdq.Client.submit`` / ``submit_many`` to enqueue and
``rdq.Worker`` running an ``rdq.App`` with one async handler.

Settings are rdq's defaults: the queue's default config (``concurrency`` set to the harness's
``--concurrency``, 10 by default, which is also rdq's default), the store's default pool, and
``notify`` on (the Postgres plugin's LISTEN/NOTIFY ``wait_due``) unless the harness measures
polling, which opens the worker's store with ``?notify=false``. Logging is configured as
``rdq worker`` configures it (JSON lines at INFO).

Completion records: the task row itself (``status = 'SUCCEEDED'``, ``attempts``: a JSON array
of attempt records). On PostgreSQL they are read with SQL against the documented schema
(``docs/postgres-schema.md``); on any other store through ``storage.stats``/``storage.get``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

import rdq
import rdq.logging
import rdq.tracing
from bench.e2e.systems import QUEUE, TASK, BenchSystem, BenchWorker, VerificationError

__all__ = ["System", "Worker"]

_TABLE = "rdq.task"


def _with_query(url: str, **params: str) -> str:
    # The query is rebuilt as text: urlunsplit would turn sqlite:////abs/path (no host, a
    # path starting with //) into sqlite://abs/path.
    base, _, query = url.partition("?")
    kept = [(k, v) for k, v in parse_qsl(query) if k not in params]
    return f"{base}?{urlencode(kept + list(params.items()))}"


def _is_postgres(url: str) -> bool:
    return urlsplit(url).scheme in ("postgresql", "postgres")


class System(BenchSystem):
    """Producer and admin side: a ``Client`` on the store's own pool (plus one plain
    connection for the admin SQL on PostgreSQL)."""

    name = "rdq"

    async def open(self, url: str) -> None:
        self._storage = rdq.open_storage(url)
        await self._storage.connect()
        await self._storage.migrate()
        self._client = rdq.Client(self._storage)
        self._conn: asyncpg.Connection | None = None
        self._ids: list[str] = []
        if _is_postgres(url):
            dsn = urlunsplit(urlsplit(url)._replace(query=""))
            self._conn = await asyncpg.connect(dsn)

    async def reset(self) -> None:
        self._ids = []
        if self._conn is not None:
            # CASCADE: the dedup keys (schema 11) reference the task table
            await self._conn.execute(f"TRUNCATE {_TABLE} CASCADE")
        else:
            raise NotImplementedError("reset needs PostgreSQL")

    async def enqueue_one(self, body: dict[str, Any]) -> None:
        submitted = await self._client.submit(TASK, body, queue=QUEUE)
        self._ids.append(submitted.id)

    async def enqueue_many(self, bodies: Sequence[dict[str, Any]]) -> None:
        submitted = await self._client.submit_many(
            [rdq.Submission(TASK, body, queue=QUEUE) for body in bodies]
        )
        self._ids.extend(s.id for s in submitted)

    async def completed(self) -> int:
        if self._conn is not None:
            value: int = await self._conn.fetchval(
                f"SELECT count(*) FROM {_TABLE} WHERE queue = $1 AND status = 'SUCCEEDED'",
                QUEUE,
            )
            return value
        return (await self._storage.stats(QUEUE)).succeeded

    async def db_now(self) -> datetime | None:
        if self._conn is None:
            return None
        value: datetime = await self._conn.fetchval("SELECT clock_timestamp()")
        return value

    async def last_completion(self) -> datetime | None:
        if self._conn is None:
            return None
        value: datetime | None = await self._conn.fetchval(
            f"SELECT max(completed_at) FROM {_TABLE} WHERE queue = $1 AND status = 'SUCCEEDED'",
            QUEUE,
        )
        return value

    async def verify(self, expected: int) -> None:
        if len(self._ids) != expected or len(set(self._ids)) != expected:
            raise VerificationError(f"rdq: {len(set(self._ids))} distinct ids submitted")
        if self._conn is not None:
            await self._verify_sql(expected)
        else:
            await self._verify_get(expected)

    async def _verify_sql(self, expected: int) -> None:
        assert self._conn is not None
        row = await self._conn.fetchrow(
            f"""
            SELECT count(*) AS total,
                   count(*) FILTER (
                       WHERE status = 'SUCCEEDED' AND attempt_count = 1
                         AND json_array_length(attempts) = 1
                         AND attempts -> 0 ->> 'outcome' = 'SUCCEEDED'
                         AND (attempts -> 0 ->> 'number')::int = 1
                   ) AS once,
                   count(*) FILTER (WHERE id = ANY($2::text[])) AS submitted
            FROM {_TABLE} WHERE queue = $1
            """,
            QUEUE,
            self._ids,
        )
        assert row is not None
        if not row["total"] == row["once"] == row["submitted"] == expected:
            raise VerificationError(
                f"rdq: {row['once']} of {row['total']} tasks SUCCEEDED with exactly one "
                f"SUCCEEDED attempt ({row['submitted']} of the submitted ids found), "
                f"expected {expected}"
            )

    async def _verify_get(self, expected: int) -> None:
        bad = 0
        for task_id in self._ids:
            task = await self._storage.get(task_id)
            outcomes = [str(a.outcome) for a in task.attempts]
            if (
                str(task.status) != "SUCCEEDED"
                or len(outcomes) != 1
                or "SUCCEEDED" not in (outcomes[0])
            ):
                bad += 1
        if bad:
            raise VerificationError(f"rdq: {bad} of {expected} tasks not SUCCEEDED exactly once")

    async def unlogged_tables(self) -> list[str]:
        if self._conn is None:
            return []
        rows = await self._conn.fetch(
            "SELECT relname FROM pg_class WHERE relpersistence = 'u' AND relkind = 'r'"
        )
        return [r["relname"] for r in rows]

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
        await self._storage.aclose()


class Worker(BenchWorker):
    """``rdq.Worker`` on the benchmark queue with a no-op async handler."""

    worker_options: ClassVar[dict[str, Any]] = {}
    """Keyword arguments of ``rdq.Worker`` beyond its defaults (none here)."""

    async def open(self) -> None:
        rdq.logging.configure(json=True, level="INFO")
        url = self.url if self.notify else _with_query(self.url, notify="false")
        self._storage = rdq.open_storage(url)
        await self._storage.connect()
        self._app = rdq.App()
        self.declare(self._app)
        on_start = self.on_start

        @self._app.handler(TASK, queue=QUEUE)
        async def noop(body: dict[str, Any]) -> None:
            on_start(body)

        # made, and its modules imported (OpenTelemetry's too, when installed: what the worker
        # otherwise loads as it starts), before READY: a process's start is not its drain
        self._worker = rdq.Worker(self._app, self._storage, queues=[QUEUE], **self.worker_options)
        rdq.tracing.preload()

    def declare(self, app: rdq.App) -> None:
        """Declare the benchmark queue: rdq's defaults with the harness's concurrency."""
        app.queue(QUEUE, concurrency=self.concurrency)

    async def run(self, stop: asyncio.Event) -> None:
        worker = self._worker
        run = asyncio.create_task(worker.run())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({run, stopping}, return_when=asyncio.FIRST_COMPLETED)
        worker.stop()
        stopping.cancel()
        await run

    async def close(self) -> None:
        await self._storage.aclose()
