"""``MemoryStorage``: every rule of the storage contract, in process memory."""

from __future__ import annotations

import heapq
import secrets
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from rdq.errors import ConfigError, NotFound, StaleClaim
from rdq.spi import (
    CONTRACT_VERSION,
    QUEUE_KEY,
    Attempt,
    AuditEntry,
    AuditFilter,
    Capabilities,
    Claimed,
    ClaimGate,
    ClaimOrder,
    Completion,
    Control,
    Counts,
    DLQFilter,
    DLQGroup,
    Envelope,
    Outcome,
    Page,
    Selector,
    Stats,
    Status,
    StorageBase,
    TaskFilter,
    WorkerInfo,
    limits,
    status_time,
    task_keys,
)
from rdq_memory import _flow
from rdq_memory._codec import copy_in, read
from rdq_memory._notify import wait_due
from rdq_memory._order import Candidates
from rdq_memory._pages import audit_page, dlq_groups, dlq_page, task_page
from rdq_memory._state import DueEntry, MemoryState, QueueIndex, Record
from rdq_memory._url import Clock, MemoryConfig, parse_url

__all__ = ["MemoryStorage", "forget_named_stores"]

_named: dict[str, MemoryState] = {}
_named_lock = threading.Lock()


def _utc_now() -> datetime:
    return datetime.now(UTC)


def forget_named_stores() -> None:
    """Drop every named store of this process (for tests)."""
    with _named_lock:
        _named.clear()


class MemoryStorage(StorageBase):
    """The reference store. ``clock`` is the storage clock (injectable for tests); it must
    return timezone-aware datetimes. ``state`` shares the tasks of another store (what
    :meth:`reopen` does)."""

    def __init__(
        self,
        *,
        name: str | None = None,
        clock: Clock | None = None,
        timeout: float = limits.DEFAULT_OPERATION_TIMEOUT,
        state: MemoryState | None = None,
    ) -> None:
        if state is not None:
            self._state = state
        elif name:
            with _named_lock:
                self._state = _named.setdefault(name, MemoryState())
        else:
            self._state = MemoryState()
        self._name = name
        self._clock: Clock = clock or _utc_now
        self.config = MemoryConfig(name=name, timeout=timeout, clock=clock)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryStorage:
        config = parse_url(url, **options)
        return cls(name=config.name, clock=config.clock, timeout=config.timeout)

    def __repr__(self) -> str:
        return f"MemoryStorage(name={self._name!r})"

    @property
    def state(self) -> MemoryState:
        """The tasks, leases and audit entries this store holds (shared with its reopened
        stores and, for a named store, every store of that name)."""
        return self._state

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def reopen(self) -> MemoryStorage:
        """A second store on the same tasks (named or not), usable from another thread."""
        return MemoryStorage(
            name=self._name, clock=self.config.clock, timeout=self.config.timeout, state=self._state
        )

    def _clock_now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ConfigError("the memory store's clock returned a naive datetime", key="clock")
        return now

    async def _now(self) -> datetime:
        return self._clock_now()

    # --- admission -------------------------------------------------------------------------

    async def _enqueue(self, task: Envelope, delay: timedelta | None) -> bool:
        return (await self._enqueue_batch([task], delay))[0]

    async def _enqueue_batch(self, tasks: list[Envelope], delay: timedelta | None) -> list[bool]:
        copies = [copy_in(task) for task in tasks]
        state = self._state
        with state.lock:
            now = self._clock_now()
            stored = state.admissible(copies)
            for task, new in zip(copies, stored, strict=True):
                if not new:
                    continue
                task.status = Status.PENDING
                task.created_at = now
                if task.next_attempt_at is None:
                    task.next_attempt_at = now + (delay or timedelta(0))
                for owned in _OWNED_AFTER_ADMISSION:
                    setattr(task, owned, None)
                state.add(Record(task))
            for queue in {t.queue for t, new in zip(copies, stored, strict=True) if new}:
                state.wake(queue)
            return stored

    async def _import_tasks(self, tasks: list[Envelope]) -> list[bool]:
        copies = [copy_in(task) for task in tasks]
        state = self._state
        with state.lock:
            stored = state.admissible(copies)
            for task, new in zip(copies, stored, strict=True):
                if new:
                    state.add(Record(task))
                    state.wake(task.queue)
            return stored

    # --- claiming --------------------------------------------------------------------------

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

    async def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        state = self._state
        with state.lock:
            record = self._fenced(task_id, token)
            expires = self._clock_now() + lease
            record.task.lease_expires_at = expires
            record.bump()
            state.schedule(record)
            return expires

    # --- resolution ------------------------------------------------------------------------

    async def _reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        state = self._state
        with state.lock:
            record = self._resolve(task_id, token, attempt)
            record.task.status = Status.PENDING
            record.task.next_attempt_at = next_at
            state.schedule(record)
            state.wake(record.task.queue)

    async def _complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        with self._state.lock:
            record = self._resolve(task_id, token, attempt)
            record.task.status = Status.SUCCEEDED
            record.task.completed_at = self._clock_now()

    async def _complete_many(
        self, completions: list[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        results: list[StaleClaim | NotFound | None] = []
        with self._state.lock:
            now = self._clock_now()
            for item in completions:
                try:
                    record = self._resolve(item.task_id, item.token, item.attempt)
                except (StaleClaim, NotFound) as exc:
                    results.append(exc)
                    continue
                record.task.status = Status.SUCCEEDED
                record.task.completed_at = now
                results.append(None)
        return results

    async def _dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        state = self._state
        with state.lock:
            record = self._resolve(task_id, token, attempt)
            record.task.status = Status.DEAD
            record.task.dead_lettered_at = self._clock_now()
            state.add_dead(record.task)

    def _fenced(self, task_id: str, token: str) -> Record:
        record = self._state.tasks.get(task_id)
        if record is None:
            raise NotFound(task_id)
        if record.task.status != Status.IN_FLIGHT or record.token != token:
            raise StaleClaim(task_id)
        return record

    def _resolve(self, task_id: str, token: str, attempt: Attempt) -> Record:
        record = self._fenced(task_id, token)
        task = record.task
        task.attempts.append(attempt)
        task.attempt_count += 1
        _release(record)
        return record

    # --- DLQ -------------------------------------------------------------------------------

    async def _dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return dlq_page(self._state, queue, dlq_filter, page)

    async def _dlq_groups(self, queue: str) -> list[DLQGroup]:
        return dlq_groups(self._state, queue)

    async def _get(self, task_id: str) -> Envelope:
        with self._state.lock:
            record = self._state.tasks.get(task_id)
            if record is None:
                raise NotFound(task_id)
            return read(record)

    async def _redrive(self, queue: str, selector: Selector) -> int:
        state = self._state
        with state.lock:
            now = self._clock_now()
            selected = state.select(queue, selector, (Status.DEAD,))
            for record in selected:
                task = record.task
                state.remove_dead(task)
                task.status = Status.PENDING
                task.attempt_count = 0
                task.redrive_count += 1
                task.next_attempt_at = now
                task.dead_lettered_at = None
                record.bump()
                state.schedule(record)
            if selected:
                state.wake(queue)
            return len(selected)

    async def _purge(self, queue: str, selector: Selector) -> int:
        state = self._state
        with state.lock:
            selected = state.select(queue, selector, (Status.DEAD, Status.CANCELLED))
            for record in selected:
                state.delete(record)
            return len(selected)

    # --- every task ------------------------------------------------------------------------

    async def _list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return task_page(self._state, queue, task_filter, page)

    async def _cancel(self, queue: str, task_ids: list[str]) -> int:
        state = self._state
        with state.lock:
            now = self._clock_now()
            live = (Status.PENDING, Status.IN_FLIGHT)
            cancelled = 0
            for task_id in task_ids:
                record = state.tasks.get(task_id)
                if record is None or record.task.queue != queue or record.task.status not in live:
                    continue
                record.task.status = Status.CANCELLED
                record.task.cancelled_at = now
                _release(record)
                cancelled += 1
            return cancelled

    async def _list_queues(self) -> list[Stats]:
        with self._state.lock:
            now = self._clock_now()
            names = sorted(name for name, idx in self._state.queues.items() if idx.ids)
            return [self._state.stats(name, now) for name in names]

    # --- audit trail -----------------------------------------------------------------------

    async def _append_audit(self, entry: AuditEntry) -> AuditEntry:
        with self._state.lock:
            stored = msgspec.structs.replace(
                entry, id=uuid.uuid4().hex, time=self._clock_now(), selector=dict(entry.selector)
            )
            self._state.audit.append(stored)
        return stored

    async def _list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        return audit_page(self._state, audit_filter, page)

    # --- flow control, the fleet and the counts --------------------------------------------

    async def _list_controls(self, queue: str | None) -> list[Control]:
        with self._state.lock:
            return _flow.list_controls(self._state, queue, self._clock_now())

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        with self._state.lock:
            stored = _flow.put_control(self._state, control, expected_version, self._clock_now())
            self._state.wake(control.queue)  # a control lifted may make tasks claimable
            return stored

    async def _delete_control(self, queue: str, key: str, expected_version: int) -> bool:
        with self._state.lock:
            deleted = _flow.delete_control(self._state, queue, key, expected_version)
            self._state.wake(queue)
            return deleted

    async def _retry_now(self, queue: str, task_ids: list[str]) -> int:
        with self._state.lock:
            return _flow.retry_now(self._state, queue, task_ids, self._clock_now())

    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        with self._state.lock:
            return _flow.heartbeat(self._state, info, self._clock_now())

    async def _list_workers(self) -> list[WorkerInfo]:
        with self._state.lock:
            return [self._state.workers[i] for i in sorted(self._state.workers)]

    async def _remove_worker(self, worker_id: str) -> bool:
        with self._state.lock:
            return self._state.workers.pop(worker_id, None) is not None

    async def _purge_workers(self, seen_before: datetime) -> int:
        with self._state.lock:
            return _flow.purge_workers(self._state, seen_before)

    async def _add_counts(self, counts: list[Counts]) -> None:
        with self._state.lock:
            _flow.add_counts(self._state, counts)

    async def _read_counts(self, queue: str | None, since: datetime) -> list[Counts]:
        with self._state.lock:
            return _flow.read_counts(self._state, queue, since)

    async def _purge_counts(self, before: datetime) -> int:
        with self._state.lock:
            return _flow.purge_counts(self._state, before)

    # --- operations ------------------------------------------------------------------------

    async def _stats(self, queue: str) -> Stats:
        with self._state.lock:
            return self._state.stats(queue, self._clock_now())

    async def _purge_succeeded(self, queue: str, older_than: datetime) -> int:
        state = self._state
        with state.lock:
            doomed = [
                record
                for record in state.of_queue(queue)
                if record.task.status in (Status.SUCCEEDED, Status.CANCELLED)
                and (at := status_time(record.task)) is not None
                and at < older_than
            ]
            for record in doomed:
                state.delete(record)
            return len(doomed)

    async def _wait_due(self, queue: str, timeout: float) -> bool:
        return await wait_due(self._state, queue, timeout, self._clock_now)


CAPABILITIES = Capabilities(
    contract_version=CONTRACT_VERSION,
    notify=True,
    filter_pushdown=True,
    batch_enqueue=True,
    batch_complete=True,
    group_pushdown=True,
    priorities=True,
    claim_holder=True,
    cancel=True,
    task_listing=True,
    queue_listing=True,
    import_tasks=True,
    audit=True,
    reopen=True,
    control=True,
    worker_registry=True,
    counters=True,
    fair_shares=True,
    priority_aging=True,
)
"""Everything the contract offers but ``enqueue_in`` (there is no application transaction in
process memory)."""

_OWNED_AFTER_ADMISSION = (
    "lease_expires_at",
    "claimed_by",
    "claimed_at",
    "completed_at",
    "dead_lettered_at",
    "cancelled_at",
)
"""Store-owned fields an admitted task starts without."""


def _release(record: Record) -> None:
    """Clear the lease, the token and the claim fields (the task left IN_FLIGHT)."""
    task = record.task
    task.lease_expires_at = None
    task.claimed_by = None
    task.claimed_at = None
    record.token = None
    record.bump()


def _iso(at: datetime | None) -> str:
    return at.isoformat() if at else "?"
