"""The worker registry (capability ``worker_registry``) and the per-minute counts
(``counters``) of the memory store: each operation of :class:`FleetOperations` one call of a
function here under the state's lock (the arguments already checked by the store).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec

from rdq.spi import Counts, WorkerInfo
from rdq_memory._core import MemoryCore
from rdq_memory._state import MemoryState

__all__ = [
    "FleetOperations",
    "add_counts",
    "heartbeat",
    "purge_counts",
    "purge_workers",
    "read_counts",
]


class FleetOperations(MemoryCore):
    """The worker registry and the counts (see the module docstring)."""

    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        with self._state.lock:
            return heartbeat(self._state, info, self._clock_now())

    async def _list_workers(self) -> list[WorkerInfo]:
        with self._state.lock:
            return [self._state.workers[i] for i in sorted(self._state.workers)]

    async def _remove_worker(self, worker_id: str) -> bool:
        with self._state.lock:
            return self._state.workers.pop(worker_id, None) is not None

    async def _purge_workers(self, seen_before: datetime) -> int:
        with self._state.lock:
            return purge_workers(self._state, seen_before)

    async def _add_counts(self, counts: list[Counts]) -> None:
        with self._state.lock:
            add_counts(self._state, counts)

    async def _read_counts(self, queue: str | None, since: datetime) -> list[Counts]:
        with self._state.lock:
            return read_counts(self._state, queue, since)

    async def _purge_counts(self, before: datetime) -> int:
        with self._state.lock:
            return purge_counts(self._state, before)


def heartbeat(state: MemoryState, info: WorkerInfo, now: datetime) -> WorkerInfo:
    before = state.workers.get(info.id)
    started = before.started_at if before is not None else now
    stored = msgspec.structs.replace(
        info, queues=list(info.queues), extra=dict(info.extra), started_at=started, seen_at=now
    )
    state.workers[info.id] = stored
    return stored


def purge_workers(state: MemoryState, seen_before: datetime) -> int:
    workers = state.workers
    doomed = [i for i, w in workers.items() if w.seen_at is not None and w.seen_at < seen_before]
    for worker_id in doomed:
        del workers[worker_id]
    return len(doomed)


def add_counts(state: MemoryState, counts: Sequence[Counts]) -> None:
    for entry in counts:
        total = state.counts.setdefault((entry.queue, entry.minute), [0, 0, 0, 0])
        total[0] += entry.succeeded
        total[1] += entry.failed
        total[2] += entry.dead
        total[3] += entry.deferred


def read_counts(state: MemoryState, queue: str | None, since: datetime) -> list[Counts]:
    return [
        Counts(queue=q, minute=m, succeeded=c[0], failed=c[1], dead=c[2], deferred=c[3])
        for (q, m), c in sorted(state.counts.items())
        if (queue is None or q == queue) and m >= since
    ]


def purge_counts(state: MemoryState, before: datetime) -> int:
    doomed = [key for key in state.counts if key[1] < before]
    for key in doomed:
        del state.counts[key]
    return len(doomed)
