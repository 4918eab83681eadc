"""The worker in the fleet's view: its registration, kept fresh by a heartbeat (who it is, what
it serves — its queues, and the handlers and dependencies it runs, so that an operator's typo
of one is told from a name a worker knows —, what it holds), and the attempts it ends,
counted per queue and minute for the rates over time. Both go to the store (capabilities
``worker_registry`` and ``counters``); without them, nothing is sent and nothing is lost but
the view.

Counting costs nothing per task beyond a dictionary increment: the counts are added to the
store's in one call every :data:`FLUSH` seconds (and once more when the worker stops); a
flush the store refuses is kept and added to the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from rdq.app import App
from rdq.spi import Counts, Outcome, Storage, WorkerInfo
from rdq.worker._clock import StorageClock

__all__ = ["COUNTS_TTL", "FLUSH", "HEARTBEAT", "WORKER_TTL", "Fleet", "served"]

HEARTBEAT = 5.0
"""Seconds between two heartbeats of a worker's registration."""
FLUSH = 10.0
"""Seconds between two additions of a worker's counts to the store's."""
WORKER_TTL = timedelta(hours=1)
"""A worker silent for this long is forgotten (by any worker's upkeep)."""
COUNTS_TTL = timedelta(hours=3)
"""Counts older than this are deleted (the console shows the last hour)."""

_FIELDS = {
    Outcome.SUCCEEDED: 0,
    Outcome.FAILED: 1,
    Outcome.TIMEOUT: 1,
    Outcome.PERMANENT: 2,
    Outcome.DEFERRED: 3,
    Outcome.SNOOZED: 3,  # rescheduled without an attempt used, as a held task is
}


def _rdq_version() -> str:
    try:
        return version("rdq-core")
    except PackageNotFoundError:  # pragma: no cover - a source checkout
        return ""


class Fleet:
    """One worker's registration and counts."""

    def __init__(
        self,
        storage: Storage,
        clock: StorageClock,
        worker_id: str,
        queues: Sequence[str],
        concurrency: int,
        held: Callable[[], int],
        log: Any,
        *,
        extra: dict[str, Any] | None = None,
    ) -> None:
        caps = storage.capabilities()
        self.storage = storage
        self.clock = clock
        self.log = log
        self.registered = caps.worker_registry
        self.counting = caps.counters
        self.state = "running"
        self._held = held
        self._info = WorkerInfo(
            id=worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=_rdq_version(),
            queues=list(queues),
            concurrency=concurrency,
            heartbeat=HEARTBEAT,
            extra=dict(extra or {}),
        )
        self._counts: defaultdict[tuple[str, datetime], list[int]] = defaultdict(
            lambda: [0, 0, 0, 0]
        )

    # --- counts --------------------------------------------------------------------------

    def count(self, queue: str, outcome: Outcome, dead: bool = False, n: int = 1) -> None:
        """``n`` attempts of ``queue`` ended so (a dead-lettering counts as dead)."""
        if not self.counting:
            return
        field = 2 if dead else _FIELDS.get(outcome)
        if field is None:
            return
        minute = self.clock.now().replace(second=0, microsecond=0)
        self._counts[(queue, minute)][field] += n

    async def flush(self) -> None:
        """Add the counts gathered since the last flush to the store's."""
        if not self._counts:
            return
        taken, self._counts = self._counts, defaultdict(lambda: [0, 0, 0, 0])
        batch = [
            Counts(queue=q, minute=m, succeeded=c[0], failed=c[1], dead=c[2], deferred=c[3])
            for (q, m), c in taken.items()
        ]
        try:
            await self.storage.add_counts(batch)
        except Exception:
            for (q, m), c in taken.items():  # kept for the next flush
                mine = self._counts[(q, m)]
                for i, value in enumerate(c):
                    mine[i] += value
            raise

    # --- the registration ----------------------------------------------------------------

    async def heartbeat(self) -> None:
        if not self.registered:
            return
        await self.storage.heartbeat_worker(
            WorkerInfo(**{**_fields(self._info), "held": self._held(), "state": self.state})
        )

    async def run(self, stopping: asyncio.Event) -> None:
        """Heartbeat every :data:`HEARTBEAT` seconds, flush every :data:`FLUSH`, until
        ``stopping``; store errors are logged (the next beat tries again)."""
        loop = asyncio.get_running_loop()
        next_flush = loop.time() + FLUSH
        while not stopping.is_set():
            try:
                await self.heartbeat()
                if loop.time() >= next_flush:
                    next_flush = loop.time() + FLUSH
                    await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.log.warning("fleet: heartbeat or counts not sent", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), HEARTBEAT)

    async def leave(self) -> None:
        """The worker stopped: send the last counts and take the registration out."""
        with contextlib.suppress(Exception):
            await self.flush()
        if self.registered:
            with contextlib.suppress(Exception):
                await self.storage.remove_worker(self._info.id)

    async def upkeep(self) -> None:
        """Forget workers silent for :data:`WORKER_TTL` and counts older than
        :data:`COUNTS_TTL` (any worker's maintenance does it; the store's clock decides)."""
        now = self.clock.now()
        if self.registered:
            await self.storage.purge_workers(now - WORKER_TTL)
        if self.counting:
            await self.storage.purge_counts(now - COUNTS_TTL)


def served(app: App, queues: Sequence[str]) -> dict[str, Any]:
    """What a worker of ``app`` on ``queues`` registers beside its queues: the handlers it
    runs there and the dependencies they call (``extra["handlers"]``,
    ``extra["dependencies"]``), and each queue's ``max_attempts`` (so that an operator's
    surface without the application can say how many attempts a task has left)."""
    handlers = sorted(ref for ref in app.handler_names if app.handler_queue(ref) in (*queues, None))
    dependencies = {
        dep
        for queue in queues
        for ref in handlers
        if (dep := app.dependency_for(queue, ref)) is not None
    }
    dependencies.update(
        dep for queue in queues if (dep := app.queue_config(queue).dependency) is not None
    )
    return {
        "handlers": handlers,
        "dependencies": sorted(dependencies),
        "max_attempts": {queue: app.queue_config(queue).max_attempts for queue in queues},
    }


def _fields(info: WorkerInfo) -> dict[str, Any]:
    return {f: getattr(info, f) for f in info.__struct_fields__}
