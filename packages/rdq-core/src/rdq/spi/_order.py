"""``ClaimOrder``: the order in which a claim takes a queue's due tasks (contract version 4).

By default the order is strict: highest priority first, oldest due first within one. The
queue's own control (key ``*``) may ask for two changes (see :class:`~rdq.spi.Control`):

- **priority aging** (``aging``, seconds per step of priority): oldest *aged due time* first,
  the aged due time being the due time less ``priority × aging`` seconds;
- **fair shares** (``fair``, a key prefix): the due tasks are split into groups — a task's
  group is its first key that starts with the prefix, and the tasks without one are a group
  of their own (:data:`NO_GROUP`) — and ordered by their *rank* in their group (1 for the
  group's first task in the order above, 2 for its second, …), then by that order. Every
  group's first task comes before any group's second: a shallow group waits behind at most one
  task of each other group, however deep their backlogs.

The rank counts the due tasks a claim may take: a task that a control holds back from the
start of the claim (a paused key, a gate or a rate bucket at zero, every concurrency slot
taken) has none and shifts nobody, and a task held back later in the same claim (a limit used
up by the tasks before it) is skipped where it stands. Ties (equal keys) are the store's to
break.

A store that decides claims in Python uses :meth:`ClaimOrder.arrange` on candidates it has
read (each group's first ``n`` in the order above are enough to arrange the first ``n`` ranks)
or :func:`ranked` on streams it reads lazily. A store that claims in the backend (SQL, a
script) computes the same order there; the compliance kit checks either.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from rdq.spi._flow import QUEUE_KEY, Control

__all__ = ["NO_GROUP", "ClaimOrder", "OrderKey", "aged_due", "fair_group", "merged", "ranked"]

T = TypeVar("T")

NO_GROUP = ""
"""The group of the tasks of a fair queue that have no key of its family (no key is empty)."""

OrderKey = tuple[Any, ...]
"""Where a task stands within its group: ``(-priority, due)``, or ``(aged due, -priority)``."""


def fair_group(keys: Iterable[str], prefix: str) -> str:
    """The group of a task with ``keys`` in a queue fair over ``prefix``: its first key that
    starts with ``prefix``, else :data:`NO_GROUP`."""
    for key in keys:
        if key.startswith(prefix):
            return key
    return NO_GROUP


def aged_due(due: datetime, priority: int, aging: float) -> datetime:
    """The due time a task of ``priority`` due at ``due`` is ordered by under ``aging``
    seconds per step of priority."""
    return due - timedelta(seconds=priority * aging)


@dataclass(frozen=True)
class ClaimOrder:
    """The claim order of one queue: ``fair`` and ``aging`` of its ``*`` control (both
    ``None``: strict priorities)."""

    fair: str | None = None
    aging: float | None = None

    @classmethod
    def of(cls, control: Control | None) -> ClaimOrder:
        """The order the queue's own control asks for (strict without one)."""
        if control is None or control.key != QUEUE_KEY:
            return cls()
        return cls(control.fair, control.aging)

    @property
    def strict(self) -> bool:
        """True for the order of contract version 3: priority, then due time."""
        return self.fair is None and self.aging is None

    def key(self, priority: int, due: datetime) -> OrderKey:
        """A task's place within its group (within the queue, without ``fair``)."""
        if self.aging is None:
            return (-priority, due)
        return (aged_due(due, priority, self.aging), -priority)

    def group(self, keys: Iterable[str]) -> str:
        """A task's group (:data:`NO_GROUP` for every task of a queue that is not fair)."""
        return NO_GROUP if self.fair is None else fair_group(keys, self.fair)

    def arrange(
        self,
        candidates: Iterable[T],
        *,
        priority: Callable[[T], int],
        due: Callable[[T], datetime],
        keys: Callable[[T], Sequence[str]],
    ) -> list[T]:
        """``candidates`` (due tasks no control holds back from the start) in claim order."""
        groups: dict[str, list[tuple[OrderKey, int, T]]] = {}
        for n, item in enumerate(candidates):
            groups.setdefault(self.group(keys(item)), []).append(
                (self.key(priority(item), due(item)), n, item)
            )
        ordered: list[tuple[int, OrderKey, int, T]] = []
        for members in groups.values():
            members.sort(key=lambda m: (m[0], m[1]))
            ordered.extend((rank, k, n, item) for rank, (k, n, item) in enumerate(members))
        ordered.sort(key=lambda e: (e[0], e[1], e[2]))
        return [e[3] for e in ordered]


def merged(streams: Iterable[Iterator[tuple[OrderKey, T]]]) -> Iterator[tuple[OrderKey, T]]:
    """The items of ``streams`` (each in ascending key order) in one ascending stream."""
    return heapq.merge(*streams, key=lambda item: item[0])


def ranked(groups: Iterable[Iterator[tuple[OrderKey, T]]]) -> Iterator[T]:
    """The items of ``groups`` (one stream per group, each in claim order) by rank, then key:
    every group's first before any group's second. Read lazily, one item ahead per group."""
    heap: list[tuple[int, OrderKey, int, T, Iterator[tuple[OrderKey, T]]]] = []
    tie = itertools.count()
    for stream in groups:
        head = next(stream, None)
        if head is not None:
            heap.append((0, head[0], next(tie), head[1], stream))
    heapq.heapify(heap)
    while heap:
        rank, _, _, item, stream = heapq.heappop(heap)
        yield item
        head = next(stream, None)
        if head is not None:
            heapq.heappush(heap, (rank + 1, head[0], next(tie), head[1], stream))
