"""rdq with its queue configured ``QueueConfig(keep_succeeded=False)``: a task that succeeds is
removed instead of kept as a SUCCEEDED row. Everything else is ``rdq_runner``'s (the same
store, client and worker, the queue's ``concurrency`` the harness's), so the two side by side
show what discarding succeeded tasks changes: the drain's rate, its WAL and commits per task,
and the rows left behind.

The setting is new: with an rdq whose ``QueueConfig`` has no ``keep_succeeded`` the system is
unavailable (``unavailable()`` says why, and the harness skips it).

Completion records: none in the store once a task is removed. So a task is counted completed
once its row is gone (or, should the store keep it, is SUCCEEDED); a drain is timed on the
harness's clock; and each worker process's handler records the task numbers it ran
(``ledger``), from which verification checks that every task ran exactly once, beside the
store holding no row of the queue's at the end (none left to run, dead-lettered, or kept).
"""

from __future__ import annotations

import dataclasses
import shutil
from datetime import datetime
from importlib import metadata
from typing import Any, ClassVar

import rdq
from bench.e2e import ledger, rdq_runner
from bench.e2e.systems import QUEUE, SystemUnavailable, VerificationError

__all__ = ["System", "Worker", "queue_config", "unavailable"]


def unavailable(config_class: type = rdq.QueueConfig) -> str | None:
    """Why this system cannot run here: the installed rdq's ``QueueConfig`` has no
    ``keep_succeeded`` (None when it has)."""
    names = {f.name for f in dataclasses.fields(config_class)}
    if "keep_succeeded" in names:
        return None
    try:
        version = metadata.version("rdq-core")
    except metadata.PackageNotFoundError:
        version = "?"
    return f"the installed rdq-core ({version}) has no QueueConfig.keep_succeeded"


def queue_config(concurrency: int) -> rdq.QueueConfig:
    """The queue's config: rdq's defaults, ``concurrency``, and succeeded tasks not kept."""
    return rdq.QueueConfig(concurrency=concurrency, keep_succeeded=False)  # type: ignore[call-arg]


class System(rdq_runner.System):
    """``rdq_runner``'s producer side (the setting is the worker's: it deletes a task as it
    completes it), completions counted as rows gone and verification from the workers'
    record."""

    name = "rdq_discard"
    harness_statements: ClassVar[dict[str, int] | None] = {
        "completed": 1,
        "db_now": 0,
        "last_completion": 0,
    }

    async def open(self, url: str) -> None:
        await super().open(url)
        if self._conn is None:
            raise SystemUnavailable("rdq_discard runs on PostgreSQL only")
        if not getattr(self._storage.capabilities(), "discard_succeeded", False):
            raise SystemUnavailable(
                f"{type(self._storage).__name__} does not offer discard_succeeded "
                "(a worker refuses a queue with keep_succeeded=False on it)"
            )
        self._ledger = ledger.ledger_dir(url)

    async def reset(self) -> None:
        await super().reset()
        for path in self._ledger.glob("*.json"):
            path.unlink()

    async def completed(self) -> int:
        assert self._conn is not None
        unfinished: int = await self._conn.fetchval(
            f"SELECT count(*) FROM {rdq_runner._TABLE} WHERE queue = $1 AND status <> 'SUCCEEDED'",
            QUEUE,
        )
        return len(self._ids) - unfinished

    async def db_now(self) -> datetime | None:
        return None  # no completion time survives a removed task: the harness's clock

    async def last_completion(self) -> datetime | None:
        return None

    async def verify(self, expected: int) -> None:
        assert self._conn is not None
        problems = []
        if len(self._ids) != expected or len(set(self._ids)) != expected:
            problems.append(f"{len(set(self._ids))} distinct ids submitted, expected {expected}")
        left = await self._conn.fetch(
            f"SELECT status::text AS status, count(*) AS n FROM {rdq_runner._TABLE} "
            "WHERE queue = $1 GROUP BY status ORDER BY status",
            QUEUE,
        )
        if left:
            shown = ", ".join(f"{r['n']} {r['status']}" for r in left)
            problems.append(f"tasks left in the store ({shown}); keep_succeeded=False removes them")
        problems += ledger.problems(ledger.runs(self._ledger), expected)
        if problems:
            raise VerificationError("rdq_discard: " + "; ".join(problems))

    async def close(self) -> None:
        if hasattr(self, "_ledger"):
            shutil.rmtree(self._ledger, ignore_errors=True)
        await super().close()


class Worker(rdq_runner.Worker):
    """``rdq_runner``'s worker on a queue that does not keep succeeded tasks; its handler
    records each task it ran, written to the ledger when the process stops."""

    async def open(self) -> None:
        if (why := unavailable()) is not None:
            raise RuntimeError(why)
        self._ran: list[int] = []
        ran, on_start = self._ran, self.on_start

        def record(body: dict[str, Any]) -> None:
            ran.append(body["i"])
            on_start(body)

        self.on_start = record
        await super().open()

    def declare(self, app: rdq.App) -> None:
        app.queue(QUEUE, queue_config(self.concurrency))

    async def close(self) -> None:
        ledger.write(ledger.ledger_dir(self.url), self._ran)
        await super().close()
