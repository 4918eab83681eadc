"""The claims of the memory store: ``_claim_due`` and its hooks.

A claim goes through the queue's controls (:class:`~rdq.spi.ClaimGate`, from
:mod:`rdq_memory._flow`) and takes due tasks either strictly (highest priority first, then
oldest due, from the per-priority heaps) or in the order the queue's control asks for (aged,
fair; :class:`~rdq_memory._order.Candidates`). The hooks (``_claim_gate``, ``_claim_order``,
``_candidates``, ``_claim``) are methods so that a test store can change one rule and keep the
rest. Kept out of ``_store`` because the claim is the one operation with rules of its own.
"""

from __future__ import annotations

import heapq
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta

from rdq.spi import (
    QUEUE_KEY,
    Attempt,
    Claimed,
    ClaimGate,
    ClaimOrder,
    Envelope,
    Outcome,
    Status,
    task_keys,
)
from rdq_memory import _flow
from rdq_memory._codec import read
from rdq_memory._core import MemoryCore
from rdq_memory._order import Candidates
from rdq_memory._state import DueEntry, QueueIndex, Record

__all__ = ["ClaimOperations"]


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
            if gate is not None and _flow.blocked_queue(gate):
                return claimed
            order = self._claim_order(queue)
            index = state.regroup(queue, order.fair)
            if not order.strict:
                self._claim_in_order(index, order, gate, now, limit, lease, worker_id, claimed)
                if gate is not None:
                    _flow.keep_gate(state, queue, gate)
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
                _flow.keep_gate(state, queue, gate)
        return claimed

    def _claim_gate(self, queue: str, now: datetime) -> ClaimGate | None:
        """The controls a claim of ``queue`` goes through (``None``: nothing restricts it)."""
        return _flow.claim_gate(self._state, queue, now)

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


def _iso(at: datetime | None) -> str:
    return at.isoformat() if at else "?"
