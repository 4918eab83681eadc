"""The claims of the memory store: ``_claim_due``, its hooks, and everything that decides a
claim.

A claim goes through the queue's controls (:class:`~rdq.spi.ClaimGate`, built by
:func:`claim_gate` from the control records and the live leases of their keys) and takes due
tasks either strictly (highest priority first, then oldest due, from the per-priority heaps) or
in the order the queue's control asks for (aged, fair: :class:`Candidates`). What a claim took
from the gates and the rate buckets is stored back by :func:`keep_gate`. The hooks
(``_claim_gate``, ``_claim_order``, ``_candidates``, ``_claim``) are methods so that a test
store can change one rule and keep the rest.
"""

from __future__ import annotations

import heapq
import secrets
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import msgspec

from rdq.spi import (
    QUEUE_KEY,
    Attempt,
    Claimed,
    ClaimGate,
    ClaimOrder,
    Envelope,
    OrderKey,
    Outcome,
    Status,
    merged,
    ranked,
    task_keys,
)
from rdq_memory._codec import read
from rdq_memory._controls import in_use
from rdq_memory._core import MemoryCore
from rdq_memory._state import DueEntry, Heaps, MemoryState, QueueIndex, Record

__all__ = ["Candidates", "ClaimOperations", "claim_gate", "keep_gate"]


class ClaimOperations(MemoryCore):
    """``_claim_due`` and the hooks it is built of (see the module docstring)."""

    async def _claim_due(
        self, queue: str, limit: int, lease: timedelta, worker_id: str | None
    ) -> list[Claimed]:
        state = self._state
        claimed: list[Claimed] = []
        with state.lock:
            now = self._clock_now()
            gate = self._claim_gate(queue, now)
            if gate is not None and blocked_queue(gate):
                return claimed
            order = self._claim_order(queue)
            index = state.regroup(queue, order.fair)
            if not order.strict:
                self._claim_in_order(index, order, gate, now, limit, lease, worker_id, claimed)
                if gate is not None:
                    keep_gate(state, queue, gate)
                return claimed
            heaps = index.due
            held_back: list[tuple[int, DueEntry]] = []
            for priority in sorted(heaps, reverse=True):
                heap = heaps[priority]
                while heap and len(claimed) < limit and heap[0][0] <= now:
                    entry = heapq.heappop(heap)
                    record = state.live(entry)
                    if record is None:
                        continue
                    if gate is not None:
                        keys = task_keys(record.task)
                        if not gate.admits(keys):  # skipped, never waited on
                            held_back.append((priority, entry))
                            continue
                        gate.take(keys)
                    self._claim(record, now, lease, worker_id)
                    claimed.append(Claimed(read(record), record.token or ""))
                if len(claimed) == limit:
                    break
            for priority, entry in held_back:
                heapq.heappush(heaps[priority], entry)
            if gate is not None:
                keep_gate(state, queue, gate)
        return claimed

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        """The controls a claim of ``queue`` goes through (``None``: nothing restricts it)."""
        return claim_gate(self._state, queue, now)

    def _claim_order(self, queue: str) -> ClaimOrder:
        """The order the queue's own control asks for (strict without one)."""
        return ClaimOrder.of(self._state.controls.get(queue, {}).get(QUEUE_KEY))

    def _candidates(
        self,
        index: QueueIndex,
        order: ClaimOrder,
        now: datetime,
        closed: Callable[[Envelope], bool],
    ) -> Candidates:
        """The due tasks of ``index``'s queue in ``order``, read lazily."""
        return Candidates(self._state, index, order, now, closed)

    def _claim_in_order(
        self,
        index: QueueIndex,
        order: ClaimOrder,
        gate: ClaimGate | None,
        now: datetime,
        limit: int,
        lease: timedelta,
        worker_id: str | None,
        claimed: list[Claimed],
    ) -> None:
        """Claim up to ``limit`` due tasks in ``order`` (aged, fair), the controls honoured."""

        def closed(task: Envelope) -> bool:
            return gate is not None and gate.closed_from_start(task_keys(task))

        candidates = self._candidates(index, order, now, closed)
        try:
            for record in candidates:
                if len(claimed) == limit:
                    break
                if gate is not None:
                    keys = task_keys(record.task)
                    if not gate.admits(keys):  # a limit used up by the tasks before it
                        continue
                    gate.take(keys)
                self._claim(record, now, lease, worker_id)
                claimed.append(Claimed(read(record), record.token or ""))
        finally:
            candidates.restore()

    def _claim(self, record: Record, now: datetime, lease: timedelta, worker: str | None) -> None:
        task = record.task
        if task.status == Status.IN_FLIGHT:  # a lapsed lease: record it, count it
            task.attempts.append(
                Attempt(
                    number=task.attempt_count + 1,
                    outcome=Outcome.LEASE_EXPIRED,
                    error_type="LeaseExpired",
                    error_message=(
                        f"the lease expired at {_iso(task.lease_expires_at)} before the "
                        "attempt was resolved"
                    ),
                    started_at=task.claimed_at,
                    finished_at=now,
                    worker_id=task.claimed_by,
                )
            )
            task.attempt_count += 1
        task.status = Status.IN_FLIGHT
        task.lease_expires_at = now + lease
        task.claimed_at = now
        task.claimed_by = worker
        record.token = secrets.token_hex(16)
        record.bump()
        self._state.schedule(record)


# --- the controls' gate -------------------------------------------------------------------


def claim_gate(state: MemoryState, queue: str, now: datetime) -> ClaimGate | None:
    """The gate a claim of ``queue`` goes through, or ``None`` when nothing restricts it."""
    controls = state.controls.get(queue)
    if not controls:
        return None
    limited = {k for k, c in controls.items() if c.concurrency is not None}
    gate = ClaimGate(
        controls, state.buckets.get(queue, {}), in_use(state, queue, limited, now), now
    )
    return None if gate.idle else gate


def keep_gate(state: MemoryState, queue: str, gate: ClaimGate) -> None:
    """Store what a claim took from the gates and the rate buckets (no version change)."""
    controls = state.controls[queue]
    for key, left in gate.gates.items():
        controls[key] = msgspec.structs.replace(controls[key], gate=left)
    state.buckets.setdefault(queue, {}).update(gate.buckets)


def blocked_queue(gate: ClaimGate) -> bool:
    return gate.blocks_everything(QUEUE_KEY)


# --- the claim order of an aged or fair queue ----------------------------------------------


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


def _iso(at: datetime | None) -> str:
    return at.isoformat() if at else "?"
