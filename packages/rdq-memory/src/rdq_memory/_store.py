"""``MemoryStorage``: every rule of the storage contract, in process memory.

The store is built in layers on :mod:`rdq_memory._core` (the state and the clock), one group
of operations per module of the backend layout: :mod:`rdq_memory._admission` (admission),
:mod:`rdq_memory._claims` (claims), :mod:`rdq_memory._controls` (control records,
``retry_now``), :mod:`rdq_memory._fleet` (the worker registry, the counts),
:mod:`rdq_memory._retention` (what leaves the store) and this module
(leases — a lapsed one extended only into a free slot —, resolution, the DLQ, listings, the
audit trail, stats, and the store's capabilities).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import msgspec

from rdq.errors import NotFound, StaleClaim
from rdq.spi import (
    CONTRACT_VERSION,
    Attempt,
    AuditEntry,
    AuditFilter,
    Capabilities,
    Completion,
    DLQFilter,
    DLQGroup,
    Envelope,
    Page,
    Selector,
    Stats,
    Status,
    TaskFilter,
    status_time,
)
from rdq_memory._admission import AdmissionOperations
from rdq_memory._claims import ClaimOperations
from rdq_memory._codec import read
from rdq_memory._controls import ControlOperations, lapsed_lease_fits
from rdq_memory._core import forget_named_stores
from rdq_memory._fleet import FleetOperations
from rdq_memory._notify import wait_due
from rdq_memory._pages import audit_page, dlq_groups, dlq_page, task_page
from rdq_memory._retention import RetentionOperations
from rdq_memory._state import Record
from rdq_memory._url import parse_url

__all__ = ["MemoryStorage", "forget_named_stores"]


class MemoryStorage(
    AdmissionOperations,
    ClaimOperations,
    ControlOperations,
    FleetOperations,
    RetentionOperations,
):
    """The reference store. ``clock`` is the storage clock (injectable for tests); it must
    return timezone-aware datetimes. ``state`` shares the tasks of another store (what
    :meth:`reopen` does)."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryStorage:
        config = parse_url(url, **options)
        return cls(name=config.name, clock=config.clock, timeout=config.timeout)

    def __repr__(self) -> str:
        return f"MemoryStorage(name={self._name!r})"

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def reopen(self) -> MemoryStorage:
        """A second store on the same tasks (named or not), usable from another thread."""
        return MemoryStorage(
            name=self._name, clock=self.config.clock, timeout=self.config.timeout, state=self._state
        )

    async def _now(self) -> datetime:
        return self._clock_now()

    async def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        state = self._state
        with state.lock:
            record = self._fenced(task_id, token)
            now = self._clock_now()
            if not lapsed_lease_fits(state, record.task, now):
                raise StaleClaim(task_id)
            expires = now + lease
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

    async def _discard_completed(self, task_id: str, token: str, attempt: Attempt) -> None:
        state = self._state
        with state.lock:
            state.delete(self._fenced(task_id, token))

    async def _complete_many(
        self, completions: list[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        results: list[StaleClaim | NotFound | None] = []
        state = self._state
        with state.lock:
            now = self._clock_now()
            for item in completions:
                try:
                    if item.discard:
                        state.delete(self._fenced(item.task_id, item.token))
                        results.append(None)
                        continue
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
    retention=True,
    dedup=True,
    payload_refs=True,
    discard_succeeded=True,
)
"""Everything the contract offers but ``enqueue_in`` (there is no application transaction in
process memory)."""


def _release(record: Record) -> None:
    """Clear the lease, the token and the claim fields (the task left IN_FLIGHT)."""
    task = record.task
    task.lease_expires_at = None
    task.claimed_by = None
    task.claimed_at = None
    record.token = None
    record.bump()
