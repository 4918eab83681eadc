"""procrastinate through its documented API: an ``App`` on a ``PsycopgConnector``, a task
declared with ``@app.task``, ``defer_async`` / ``batch_defer_async`` to enqueue and
``App.run_worker_async`` as the worker.

Settings are procrastinate's defaults (its connection pool, ``listen_notify=True``, polling
fallback every 5 s, jobs kept after completion) except ``concurrency``, which is set to the
harness's ``--concurrency`` (10, like rdq's default queue concurrency and PgQueuer's default
batch) because procrastinate's default of 1 would run a single job at a time; its docs
recommend ``concurrency`` for async tasks.

Completion records: the job row (``procrastinate_jobs.status = 'succeeded'``, ``attempts``)
and one event row per transition (``procrastinate_events``: deferred, started, succeeded).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

import procrastinate

from bench.e2e.systems import QUEUE, TASK, BenchSystem, BenchWorker, OnStart, VerificationError

__all__ = ["System", "Worker"]


def _app(url: str, on_start: OnStart | None) -> tuple[procrastinate.App, Any]:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name=TASK, queue=QUEUE)
    async def noop(**body: Any) -> None:
        if on_start is not None:
            on_start(body)

    return app, noop


class System(BenchSystem):
    """Producer and admin side: the app's own pool."""

    name = "procrastinate"
    harness_statements: ClassVar[dict[str, int] | None] = {
        "completed": 2,
        "db_now": 2,
        "last_completion": 2,
    }
    """Each read takes a pool connection, which the pool checks first (psycopg_pool's
    ``check_connection``: an empty statement, a transaction of its own), then runs its query:
    two commits a read (measured: 50 reads, 104 commits with the pool's opening)."""

    async def open(self, url: str) -> None:
        self._app, self._task = _app(url, None)
        await self._app.open_async()
        await self._app.schema_manager.apply_schema_async()

    async def _value(self, query: str) -> Any:
        row = await self._app.connector.execute_query_one_async(query)
        return row["value"]

    async def reset(self) -> None:
        await self._app.connector.execute_query_async(
            "TRUNCATE procrastinate_events, procrastinate_jobs, procrastinate_workers CASCADE"
        )

    async def enqueue_one(self, body: dict[str, Any]) -> None:
        await self._task.defer_async(**body)

    async def enqueue_many(self, bodies: Sequence[dict[str, Any]]) -> None:
        await self._task.batch_defer_async(*bodies)

    async def completed(self) -> int:
        value: int = await self._value(
            "SELECT count(*) AS value FROM procrastinate_jobs WHERE status = 'succeeded'"
        )
        return value

    async def db_now(self) -> datetime:
        value: datetime = await self._value("SELECT clock_timestamp() AS value")
        return value

    async def last_completion(self) -> datetime | None:
        value: datetime | None = await self._value(
            "SELECT max(at) AS value FROM procrastinate_events WHERE type = 'succeeded'"
        )
        return value

    async def verify(self, expected: int) -> None:
        jobs = await self._app.connector.execute_query_one_async(
            """
            SELECT count(*) AS total,
                   count(*) FILTER (WHERE status = 'succeeded' AND attempts = 1) AS ok
            FROM procrastinate_jobs
            """
        )
        events = await self._app.connector.execute_query_one_async(
            """
            SELECT count(*) AS jobs,
                   count(*) FILTER (WHERE started = 1 AND succeeded = 1 AND other = 0) AS once
            FROM (
                SELECT job_id,
                       count(*) FILTER (WHERE type = 'started') AS started,
                       count(*) FILTER (WHERE type = 'succeeded') AS succeeded,
                       count(*) FILTER (WHERE type NOT IN ('deferred', 'started', 'succeeded'))
                           AS other
                FROM procrastinate_events GROUP BY job_id
            ) AS per_job
            """
        )
        problems = []
        if jobs["total"] != expected or jobs["ok"] != expected:
            problems.append(
                f"{jobs['ok']} of {jobs['total']} jobs succeeded on attempt 1, "
                f"expected {expected} of {expected}"
            )
        if events["jobs"] != expected or events["once"] != expected:
            problems.append(
                f"{events['once']} of {events['jobs']} jobs started and succeeded exactly once"
            )
        if problems:
            raise VerificationError("procrastinate: " + "; ".join(problems))

    async def unlogged_tables(self) -> list[str]:
        rows = await self._app.connector.execute_query_all_async(
            "SELECT relname FROM pg_class WHERE relpersistence = 'u' AND relkind = 'r'"
        )
        return [r["relname"] for r in rows]

    async def close(self) -> None:
        await self._app.close_async()


class Worker(BenchWorker):
    """``App.run_worker_async`` on the benchmark queue; cancelling it stops it gracefully."""

    async def open(self) -> None:
        self._app, _ = _app(self.url, self.on_start)
        await self._app.open_async()

    async def run(self, stop: asyncio.Event) -> None:
        run = asyncio.create_task(
            self._app.run_worker_async(
                queues=[QUEUE],
                concurrency=self.concurrency,
                listen_notify=self.notify,
                install_signal_handlers=False,
            )
        )
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({run, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not run.done():
            run.cancel()
        try:
            await run
        except asyncio.CancelledError:
            if not stop.is_set():
                raise

    async def close(self) -> None:
        await self._app.close_async()
