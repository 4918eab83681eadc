"""The memory store's claims in the order a queue's own control asks for (priority aging,
fair shares: ``rdq.spi.ClaimOrder``), read lazily from the queue's heaps under the state's
lock."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from datetime import datetime

from rdq.spi import ClaimOrder, Envelope, OrderKey, merged, ranked
from rdq_memory._state import DueEntry, Heaps, MemoryState, QueueIndex, Record

__all__ = ["Candidates"]


class Candidates:
    """The due tasks of one queue in claim order, each read from its heap once it is needed
    (one ahead per priority of each group). Tasks ``closed`` says a control holds back from
    the start are passed over without a rank. Every entry read goes back to its heap with
    :meth:`restore` unless its task was claimed meanwhile."""

    def __init__(
        self,
        state: MemoryState,
        index: QueueIndex,
        order: ClaimOrder,
        now: datetime,
        closed: Callable[[Envelope], bool],
    ) -> None:
        self.state = state
        self.index = index
        self.order = order
        self.now = now
        self.closed = closed
        self.read: list[tuple[list[DueEntry], DueEntry]] = []

    def __iter__(self) -> Iterator[Record]:
        if self.order.fair is None:
            return (record for _, record in self._group(self.index.due))
        return ranked(self._group(heaps) for heaps in list(self.index.groups.values()))

    def restore(self) -> None:
        """Put back every entry read whose task is still as it was (not claimed)."""
        for heap, entry in self.read:
            if self.state.live(entry) is not None:
                heapq.heappush(heap, entry)
        self.read.clear()

    def _group(self, heaps: Heaps) -> Iterator[tuple[OrderKey, Record]]:
        return merged(self._band(heap, priority) for priority, heap in list(heaps.items()))

    def _band(self, heap: list[DueEntry], priority: int) -> Iterator[tuple[OrderKey, Record]]:
        while heap and heap[0][0] <= self.now:
            entry = heapq.heappop(heap)
            record = self.state.live(entry)
            if record is None:
                continue
            self.read.append((heap, entry))
            if self.closed(record.task):
                continue
            yield self.order.key(priority, entry[0]), record
