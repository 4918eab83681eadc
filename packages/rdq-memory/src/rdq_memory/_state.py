"""The shared state behind a memory store: tasks, per-queue indexes, the audit trail,
waiters, control records, the worker registry, the counts and the dedup keys.

All access happens under ``lock`` (a ``threading.RLock``), so one state is safe to use from
many asyncio tasks and many threads (each with its own event loop) at once.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from rdq.errors import IDConflict, StorageError
from rdq.spi import (
    AuditEntry,
    Bucket,
    Control,
    DLQFilter,
    Envelope,
    Selector,
    Stats,
    Status,
    WorkerInfo,
    fair_group,
)

__all__ = ["DedupHold", "Heaps", "MemoryState", "QueueIndex", "Record", "Waiter"]

_versions = itertools.count()
"""Record versions, unique across every record of the process: an id purged and admitted
again must not match the heap entries its earlier record left behind."""


@dataclass
class Record:
    """One stored task plus what the contract keeps out of the envelope.

    ``raw`` is set on a corrupt record: the stored form that does not decode, kept unchanged
    for inspection; ``task`` then holds only the fields the store itself keeps (id, queue,
    status, times, attempts), the others at their defaults."""

    task: Envelope
    token: str | None = None
    version: int = field(default_factory=lambda: next(_versions))
    raw: str | None = None
    problem: str | None = None

    def bump(self) -> None:
        """Give the record a new version: every heap entry pushed before is stale."""
        self.version = next(_versions)


DueEntry = tuple[datetime, str, int]
"""(due at, task id, record version) — stale once the record's version moved on (or the
id's record was deleted: a record admitted later under the same id has a new version)."""


Heaps = dict[int, list[DueEntry]]
"""Per priority, a lazily-pruned heap of the due times of PENDING and IN_FLIGHT tasks."""


@dataclass
class QueueIndex:
    """Per-queue indexes: the ids of every task of the queue; the heaps of its live tasks'
    due times — ``due`` for a queue that is not fair, else ``groups``, one set of heaps per
    group of ``fair`` (the queue's fairness prefix, ``None``: not fair); the DLQ sorted by
    (dead_lettered_at, id)."""

    ids: set[str] = field(default_factory=set)
    due: Heaps = field(default_factory=dict)
    dlq: list[tuple[datetime, str]] = field(default_factory=list)
    fair: str | None = None
    groups: dict[str, Heaps] = field(default_factory=dict)
    group_of: Callable[[Sequence[str], str], str] = fair_group
    """A task's group from its keys and ``fair`` (``rdq.spi.fair_group``)."""

    def heaps_of(self, task: Envelope) -> Heaps:
        """The heaps a live task of this queue is indexed in."""
        if self.fair is None:
            return self.due
        return self.groups.setdefault(self.group_of(task.keys, self.fair), {})

    def every_heap(self) -> list[list[DueEntry]]:
        return [*self.due.values(), *(h for g in self.groups.values() for h in g.values())]


@dataclass
class DedupHold:
    """Who holds a dedup key: its task (and queue), and until when (``None``: while the task
    is live)."""

    task_id: str
    queue: str
    until: datetime | None


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
        self.audit: list[AuditEntry] = []
        self.controls: dict[str, dict[str, Control]] = {}
        """Control records by queue, then key."""
        self.buckets: dict[str, dict[str, Bucket]] = {}
        """Rate buckets by queue, then key (for the controls with a rate)."""
        self.workers: dict[str, WorkerInfo] = {}
        self.counts: dict[tuple[str, datetime], list[int]] = {}
        """(queue, minute) -> [succeeded, failed, dead, deferred]."""
        self.dedup: dict[str, DedupHold] = {}
        """Dedup keys by key (a key whose task is gone is free; see ``_admission``)."""
        self.dedup_of: dict[str, str] = {}
        """The dedup key each task was given, by task id (dropped with the task)."""

    def index(self, queue: str) -> QueueIndex:
        idx = self.queues.get(queue)
        if idx is None:
            idx = self.queues[queue] = QueueIndex()
        return idx

    def add(self, record: Record) -> None:
        """Store a new record and index it by its status."""
        task = record.task
        self.tasks[task.id] = record
        self.index(task.queue).ids.add(task.id)
        self.schedule(record)
        if task.status == Status.DEAD:
            self.add_dead(task)

    def delete(self, record: Record) -> None:
        task = record.task
        if task.status == Status.DEAD:
            self.remove_dead(task)
        del self.tasks[task.id]
        record.bump()  # its heap entries are stale from now on
        self.index(task.queue).ids.discard(task.id)
        key = self.dedup_of.pop(task.id, None)
        if key is not None and (hold := self.dedup.get(key)) and hold.task_id == task.id:
            del self.dedup[key]

    def schedule(self, record: Record) -> None:
        """Push the record's current due time (after a state change bumped its version)."""
        task = record.task
        if task.status == Status.PENDING:
            due = task.next_attempt_at
        elif task.status == Status.IN_FLIGHT:
            due = task.lease_expires_at
        else:
            return
        if due is None:
            raise StorageError(f"task {task.id!r} is {task.status} without a due time")
        heap = self.index(task.queue).heaps_of(task).setdefault(task.priority, [])
        heapq.heappush(heap, (due, task.id, record.version))

    def regroup(self, queue: str, fair: str | None) -> QueueIndex:
        """Index the live tasks of ``queue`` for fair shares over ``fair`` (``None``: as one
        queue), if they are not already."""
        idx = self.index(queue)
        if idx.fair != fair:
            idx.fair, idx.due, idx.groups = fair, {}, {}
            for record in self.of_queue(queue):
                self.schedule(record)
        return idx

    def live(self, entry: DueEntry) -> Record | None:
        """The record a heap entry stands for, if the entry is still current."""
        record = self.tasks.get(entry[1])
        return record if record is not None and record.version == entry[2] else None

    def next_due(self, queue: str) -> datetime | None:
        """The earliest due time of ``queue`` (prunes stale heap entries)."""
        earliest: datetime | None = None
        for heap in self.index(queue).every_heap():
            while heap and self.live(heap[0]) is None:
                heapq.heappop(heap)
            if heap and (earliest is None or heap[0][0] < earliest):
                earliest = heap[0][0]
        return earliest

    def add_dead(self, task: Envelope) -> None:
        if task.dead_lettered_at is None:
            raise StorageError(f"task {task.id!r} is DEAD without dead_lettered_at")
        bisect.insort(self.index(task.queue).dlq, (task.dead_lettered_at, task.id))

    def remove_dead(self, task: Envelope) -> None:
        if task.dead_lettered_at is None:
            return
        dlq = self.index(task.queue).dlq
        key = (task.dead_lettered_at, task.id)
        i = bisect.bisect_left(dlq, key)
        if i < len(dlq) and dlq[i] == key:
            del dlq[i]

    def of_queue(self, queue: str) -> list[Record]:
        idx = self.queues.get(queue)
        return [self.tasks[i] for i in idx.ids] if idx is not None else []

    def stats(self, queue: str, now: datetime) -> Stats:
        """The counts of ``queue``, as of ``now`` (the storage clock)."""
        counts = dict.fromkeys(Status, 0)
        oldest_due: datetime | None = None
        for record in self.of_queue(queue):
            task = record.task
            counts[task.status] += 1
            due = task.next_attempt_at
            if task.status == Status.PENDING and due is not None and due <= now:
                oldest_due = due if oldest_due is None else min(oldest_due, due)
        return Stats(
            queue=queue,
            pending=counts[Status.PENDING],
            in_flight=counts[Status.IN_FLIGHT],
            dlq_depth=counts[Status.DEAD],
            succeeded=counts[Status.SUCCEEDED],
            cancelled=counts[Status.CANCELLED],
            oldest_pending_age=(now - oldest_due).total_seconds() if oldest_due else None,
            as_of=now,
        )

    def admissible(self, tasks: Sequence[Envelope]) -> list[bool]:
        """Per task, whether it is new; ``IDConflict`` (before anything changes) for an id
        that lives in another queue. Call under the lock."""
        seen: dict[str, str] = {}
        new: list[bool] = []
        for task in tasks:
            queue = seen.get(task.id)
            if queue is None and task.id in self.tasks:
                queue = self.tasks[task.id].task.queue
            if queue is not None and queue != task.queue:
                raise IDConflict(task.id, queue)
            new.append(queue is None)
            seen[task.id] = task.queue
        return new

    def select(self, queue: str, selector: Selector, by_ids: tuple[Status, ...]) -> list[Record]:
        """The records a selector picks: by ids, those of ``queue`` in a status of
        ``by_ids``; by filter, the DEAD ones that match."""
        state = self
        if selector.ids is not None:
            records = (state.tasks.get(task_id) for task_id in dict.fromkeys(selector.ids))
            return [
                r
                for r in records
                if r is not None and r.task.queue == queue and r.task.status in by_ids
            ]
        dlq_filter = selector.filter or DLQFilter()
        dead = (state.tasks[task_id] for _, task_id in state.index(queue).dlq)
        return [r for r in dead if dlq_filter.matches(r.task)]

    def wake(self, queue: str) -> None:
        """Wake every ``wait_due`` caller of ``queue`` (from any thread)."""
        for waiter in self.waiters.pop(queue, []):
            waiter.loop.call_soon_threadsafe(_resolve, waiter.future)


def _resolve(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(True)
