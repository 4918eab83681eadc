"""The shared state behind a memory store: tasks, the due heap, the DLQ index and waiters.

All access happens under ``lock`` (a ``threading.RLock``), so one state is safe to use from
many asyncio tasks and many threads (each with its own event loop) at once.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import threading
from dataclasses import dataclass, field
from datetime import datetime

from rdq.spi import Envelope, Status


@dataclass
class Record:
    """One stored task plus what the contract keeps out of the envelope."""

    task: Envelope
    token: str | None = None
    claimed_at: datetime | None = None
    version: int = 0


@dataclass
class QueueIndex:
    """Per-queue indexes: a lazily-pruned heap of (due_at, id, version) for PENDING and
    IN_FLIGHT tasks, and the DLQ sorted by (dead_lettered_at, id)."""

    due: list[tuple[datetime, str, int]] = field(default_factory=list)
    dlq: list[tuple[datetime, str]] = field(default_factory=list)


@dataclass
class Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[bool]


class MemoryState:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.tasks: dict[str, Record] = {}
        self.queues: dict[str, QueueIndex] = {}
        self.waiters: dict[str, list[Waiter]] = {}

    def index(self, queue: str) -> QueueIndex:
        idx = self.queues.get(queue)
        if idx is None:
            idx = self.queues[queue] = QueueIndex()
        return idx

    def schedule(self, record: Record) -> None:
        """Push the record's current due time (after a state change bumped its version)."""
        task = record.task
        if task.status == Status.PENDING:
            due = task.next_attempt_at
        elif task.status == Status.IN_FLIGHT:
            due = task.lease_expires_at
        else:
            return
        assert due is not None
        heapq.heappush(self.index(task.queue).due, (due, task.id, record.version))

    def add_dead(self, task: Envelope) -> None:
        assert task.dead_lettered_at is not None
        bisect.insort(self.index(task.queue).dlq, (task.dead_lettered_at, task.id))

    def remove_dead(self, task: Envelope) -> None:
        assert task.dead_lettered_at is not None
        dlq = self.index(task.queue).dlq
        key = (task.dead_lettered_at, task.id)
        i = bisect.bisect_left(dlq, key)
        if i < len(dlq) and dlq[i] == key:
            del dlq[i]

    def wake(self, queue: str) -> None:
        """Wake every ``wait_due`` caller of ``queue`` (from any thread)."""
        for waiter in self.waiters.pop(queue, []):
            waiter.loop.call_soon_threadsafe(_resolve, waiter.future)


def _resolve(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(True)
