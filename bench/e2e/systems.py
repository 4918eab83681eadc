"""What the harness needs from each queue system: a producer/admin side and a worker side.

Every system (rdq, PgQueuer, procrastinate) implements both halves with its own documented,
idiomatic API. The producer side (:class:`BenchSystem`) lives in the harness process; the worker
side (:class:`BenchWorker`) runs in worker processes started by the harness (see ``_worker``),
so the drain measures real worker processes.
"""

from __future__ import annotations

import abc
import asyncio
import importlib
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, ClassVar

__all__ = [
    "DEFAULT_SYSTEMS",
    "QUEUE",
    "SYSTEMS",
    "TASK",
    "BenchSystem",
    "BenchWorker",
    "OnStart",
    "SystemUnavailable",
    "VerificationError",
    "load",
    "payload",
    "unavailable",
]

QUEUE = "bench"
"""The queue every system uses (PgQueuer: the entrypoint name is ``TASK``)."""
TASK = "noop"
"""The handler / task / entrypoint name."""

SYSTEMS = {
    "rdq": "bench.e2e.rdq_runner",
    "pgqueuer": "bench.e2e.pgqueuer_runner",
    "procrastinate": "bench.e2e.procrastinate_runner",
    "rdq_proto": "bench.e2e.rdq_proto_runner",
    "rdq_redis": "bench.e2e.rdq_redis_runner",
    "rdq_sqlite": "bench.e2e.rdq_sqlite_runner",
    "rdq_uvloop": "bench.e2e.rdq_uvloop_runner",
    "rdq_batched": "bench.e2e.rdq_batched_runner",
    "rdq_discard": "bench.e2e.rdq_discard_runner",
    "rdq_discard_batched": "bench.e2e.rdq_discard_batched_runner",
    "graphile_worker": "bench.e2e.graphile_worker_runner",
    "graphile_worker_batched": "bench.e2e.graphile_worker_batched_runner",
    "bullmq": "bench.e2e.bullmq_runner",
    "bullmq_pg": "bench.e2e.bullmq_pg_runner",
}
"""``rdq_proto`` is an experiment (rdq with a prototype ``complete_many``), never a default;
``rdq_uvloop`` is rdq with its worker processes on uvloop (needs ``uvloop`` installed); the
Node.js peers (``graphile_worker``, ``graphile_worker_batched``, ``bullmq``, ``bullmq_pg``) need
``node`` and ``npm`` (see ``_node``); ``rdq_discard`` needs an rdq whose ``QueueConfig`` has
``keep_succeeded`` (see ``unavailable``)."""
DEFAULT_SYSTEMS = ["rdq", "pgqueuer", "procrastinate"]

OnStart = Callable[[dict[str, Any]], None]
"""Called by the no-op handler with the task's payload the moment the handler starts."""


def payload(i: int) -> dict[str, Any]:
    """The payload of task ``i``: the same small JSON object for every system."""
    return {"i": i, "kind": "bench", "to": f"user-{i}@example.com"}


class SystemUnavailable(RuntimeError):
    """A system cannot run on this store (``BenchSystem.open`` found a capability missing):
    the harness skips it with the message."""


class VerificationError(AssertionError):
    """A system did not leave every task completed exactly once; the message says how."""


class BenchSystem(abc.ABC):
    """The producer/admin side of one system, connected to one database."""

    name: str

    harness_statements: ClassVar[dict[str, int] | None] = {
        "completed": 1,
        "db_now": 1,
        "last_completion": 1,
    }
    """How many transactions each of the harness's reads commits on the system's PostgreSQL
    database (one autocommit statement: 1): the drain's commit count leaves them out. None:
    not known (the count keeps them, and says so)."""

    def store_url(self, database_url: str) -> str:
        """The URL the system runs on, given the fresh PostgreSQL database made for it (a
        system on another store returns its own)."""
        return database_url

    @abc.abstractmethod
    async def open(self, url: str) -> None:
        """Connect to ``url`` and install the system's schema (the database is fresh)."""

    @abc.abstractmethod
    async def reset(self) -> None:
        """Remove every task/job and every completion record (start of a phase)."""

    @abc.abstractmethod
    async def enqueue_one(self, body: dict[str, Any]) -> int | None:
        """Submit one task through the system's single-task API (returns once durable). A
        system whose producer is another process returns the ``time.monotonic_ns()`` at which
        the submit returned there (the harness's clock would read it a pipe's delay later)."""

    def server_cpu(self) -> float | None:
        """CPU seconds used so far by a server of the system's own (a redis-server started
        for it), or None: the system runs on the shared PostgreSQL cluster, measured there."""
        return None

    async def enqueue_timed(
        self, bodies: Sequence[dict[str, Any]], batch: int | None
    ) -> float | None:
        """Submit ``bodies`` one at a time (``batch=None``) or ``batch`` per call in a producer
        process of the system's own, timed there: the seconds it took. None (the default): the
        harness submits through ``enqueue_one`` / ``enqueue_many`` and times it itself."""
        return None

    @abc.abstractmethod
    async def enqueue_many(self, bodies: Sequence[dict[str, Any]]) -> None:
        """Submit many tasks through the system's batch API (returns once durable)."""

    @abc.abstractmethod
    async def completed(self) -> int:
        """How many tasks are completed successfully right now."""

    @abc.abstractmethod
    async def db_now(self) -> datetime | None:
        """The database clock (``clock_timestamp()``), or None for a store without one."""

    @abc.abstractmethod
    async def last_completion(self) -> datetime | None:
        """The database time of the latest successful completion, or None if unknown."""

    @abc.abstractmethod
    async def verify(self, expected: int) -> None:
        """Check that exactly ``expected`` tasks exist and each completed successfully exactly
        once (one execution, no retry, nothing left queued). Raises ``VerificationError``."""

    async def settle(self) -> None:  # noqa: B027 - optional hook
        """Let the system's own store settle before a measured phase (the PostgreSQL server
        is settled by the harness)."""

    async def unlogged_tables(self) -> list[str]:
        """The system's tables that are UNLOGGED (not durable); [] when all are logged."""
        return []

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections."""


class BenchWorker(abc.ABC):
    """The worker side of one system: its real worker running a no-op async handler."""

    event_loop = "asyncio"
    """The event loop its process runs on: ``asyncio`` (the stock loop) or ``uvloop``."""
    python = True
    """Whether its process is a Python one (``bench.e2e._worker``; a profiler can wrap it)."""
    polls = True
    """Whether it can run without its wake-ups (``notify=False``), for ``--poll-systems``."""

    def __init__(self, url: str, *, notify: bool, concurrency: int, on_start: OnStart) -> None:
        self.url = url
        self.notify = notify
        self.concurrency = concurrency
        self.on_start = on_start

    @abc.abstractmethod
    async def open(self) -> None:
        """Import, connect and register the handler: everything before the worker starts."""

    @abc.abstractmethod
    async def run(self, stop: asyncio.Event) -> None:
        """Run the system's worker until ``stop`` is set, then stop it gracefully."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    @classmethod
    def command(
        cls, system: str, url: str, *, notify: bool, concurrency: int, report_starts: bool
    ) -> list[str]:
        """The command line of one worker process of ``system`` (it speaks the protocol of
        ``bench.e2e._worker``, which it is unless a system runs its workers elsewhere)."""
        command = [
            sys.executable,
            "-m",
            "bench.e2e._worker",
            system,
            url,
            "--notify" if notify else "--no-notify",
            f"--concurrency={concurrency}",
        ]
        if report_starts:
            command.append("--report-starts")
        return command


def unavailable(name: str) -> str | None:
    """Why system ``name`` cannot run with the packages installed (its module's
    ``unavailable()``), or None when it can."""
    module = importlib.import_module(SYSTEMS[name])
    check = getattr(module, "unavailable", None)
    return None if check is None else check()


def load(name: str) -> tuple[type[BenchSystem], type[BenchWorker]]:
    """The producer and worker classes of system ``name`` (imported lazily: the peers are
    only installed in the benchmark's own environment)."""
    try:
        module = importlib.import_module(SYSTEMS[name])
    except KeyError:
        raise ValueError(f"unknown system {name!r}; known: {', '.join(SYSTEMS)}") from None
    return module.System, module.Worker
