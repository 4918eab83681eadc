"""Broken stores for the clauses of the contract's second revision (priorities, the claim
holder, cancel, listing, groups, import, audit, the clock, the lifecycle, corrupt tasks).

Like ``kit_broken_stores``: each is a small subclass of the reference memory store that
breaks exactly one promise; ``BROKEN_STORES`` maps it to the kit tests that must fail.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec

from kit_broken_stores import _Broken
from rdq.errors import ConfigError, NotConnected, StaleClaim, StorageError
from rdq.spi import (
    Attempt,
    AuditEntry,
    AuditFilter,
    Claimed,
    DLQFilter,
    DLQGroup,
    Envelope,
    KeysetCursor,
    Outcome,
    Page,
    Selector,
    Stats,
    Status,
    TaskFilter,
    audit_scope,
    bounds,
    task_scope,
)
from rdq_memory import MemoryStorage
from rdq_memory._state import Record

STATEFUL = "test_random_operation_sequences_keep_the_contract"


# --- priorities ----------------------------------------------------------------------------


class IgnoresPriority(_Broken):
    """Claims oldest due first, whatever the priority."""

    async def _enqueue_batch(self, tasks: list[Envelope], delay: timedelta | None) -> list[bool]:
        flags = await super()._enqueue_batch(tasks, delay)
        with self._state.lock:
            for task in tasks:  # file every task under priority 0, keep what it says
                record = self.record(task.id)
                if record is not None and record.task.status == Status.PENDING:
                    priority = record.task.priority
                    record.task.priority = 0
                    record.bump()
                    self._state.schedule(record)
                    record.task.priority = priority
        return flags


class StopsAtTheFirstPriorityNotYetDue(_Broken):
    """Looks at the highest priority only: when its first task is not due, claims nothing."""

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        with self._state.lock:
            heaps = self._state.index(queue).due
            self._state.next_due(queue)  # prunes stale entries
            live = [p for p, heap in heaps.items() if heap]
            if live and heaps[max(live)][0][0] > self._clock_now():
                return []
        return await super().claim_due(queue, limit, lease, worker_id=worker_id)


class ReclaimsLapsedLeasesLast(_Broken):
    """Claims every due PENDING task before any lapsed lease, whatever the priorities."""

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        lapsed: list[Record] = []
        with self._state.lock:
            now = self._clock_now()
            for record in self._state.of_queue(queue):
                task = record.task
                if task.status == Status.IN_FLIGHT and (task.lease_expires_at or now) <= now:
                    lapsed.append(record)
                    record.bump()  # hide it from this claim
            try:
                claimed = await super().claim_due(queue, limit, lease, worker_id=worker_id)
            finally:
                for record in lapsed:
                    self._state.schedule(record)
            if len(claimed) < limit:
                claimed += await super().claim_due(
                    queue, limit - len(claimed), lease, worker_id=worker_id
                )
        return claimed


class TakesTheLeastUrgentTasksWhenContended(_Broken):
    """While another claim is under way, takes the least urgent due tasks (as if it skipped
    every locked row and walked the index from its far end)."""

    def __init__(self) -> None:
        super().__init__()
        self.claiming = 0

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        self.claiming += 1
        try:
            await asyncio.sleep(0)
            if self.claiming == 1:
                return await super().claim_due(queue, limit, lease, worker_id=worker_id)
            with self._state.lock:
                now = self._clock_now()
                due = [
                    r
                    for r in self._state.of_queue(queue)
                    if r.task.status == Status.PENDING
                    and r.task.next_attempt_at is not None
                    and r.task.next_attempt_at <= now
                ]
                due.sort(
                    key=lambda r: (r.task.priority, -(r.task.next_attempt_at or now).timestamp())
                )
                out = []
                for record in due[:limit]:
                    self._claim(record, now, lease, worker_id)
                    out.append(Claimed(_read(record), record.token or ""))
                return out
        finally:
            self.claiming -= 1


class RedriveResetsThePriority(_Broken):
    async def redrive(self, queue: str, selector: Selector) -> int:
        count = await super().redrive(queue, selector)
        with self._state.lock:
            for record in self._state.of_queue(queue):
                if record.task.status == Status.PENDING and record.task.redrive_count:
                    record.task.priority = 0
        return count


class AcceptsAnyPriority(_Broken):
    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        try:
            bounds.check_priority(task.priority)
        except Exception:
            task = msgspec.structs.replace(task, priority=0)
        return await super().enqueue(task, delay=delay)


class DropsThePriority(_Broken):
    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        return await super().enqueue(msgspec.structs.replace(task, priority=0), delay=delay)


# --- the claim holder ----------------------------------------------------------------------


class ForgetsTheClaimant(_Broken):
    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        return await super().claim_due(queue, limit, lease)


class CompleteKeepsTheClaimant(_Broken):
    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        record = self.record(task_id)
        held = (record.task.claimed_by, record.task.claimed_at) if record else (None, None)
        await super().complete(task_id, token, attempt)
        if record is not None:
            record.task.claimed_by, record.task.claimed_at = held


class ReclaimKeepsTheFirstClaimant(_Broken):
    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        with self._state.lock:
            holders = {r.task.id: r.task.claimed_by for r in self._state.of_queue(queue)}
            claimed = await super().claim_due(queue, limit, lease, worker_id=worker_id)
            for c in claimed:
                if holders.get(c.task.id) is not None:
                    record = self.record(c.task.id)
                    assert record is not None
                    record.task.claimed_by = c.task.claimed_by = holders[c.task.id]
        return claimed


def _relabel_lease_expired(claimed: list[Claimed], store: _Broken, worker: str | None) -> None:
    """Rewrite the worker_id of LEASE_EXPIRED records this claim just wrote."""
    for c in claimed:
        last = c.task.attempts[-1] if c.task.attempts else None
        if last is None or last.outcome != Outcome.LEASE_EXPIRED:
            continue
        if last.finished_at != c.task.claimed_at:
            continue
        fixed = msgspec.structs.replace(last, worker_id=worker)
        c.task.attempts[-1] = fixed
        record = store.record(c.task.id)
        assert record is not None
        record.task.attempts[-1] = fixed


class LeaseExpiredRecordNamesTheNewClaimant(_Broken):
    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        claimed = await super().claim_due(queue, limit, lease, worker_id=worker_id)
        _relabel_lease_expired(claimed, self, worker_id)
        return claimed


class LeaseExpiredRecordInventsAWorker(_Broken):
    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        claimed = await super().claim_due(queue, limit, lease, worker_id=worker_id)
        for c in claimed:
            last = c.task.attempts[-1] if c.task.attempts else None
            if last is not None and last.outcome == Outcome.LEASE_EXPIRED and not last.worker_id:
                _relabel_lease_expired([c], self, "unknown-worker")
        return claimed


class AcceptsAnyWorkerId(_Broken):
    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        try:
            bounds.check_worker_id(worker_id)
        except Exception:
            worker_id = None
        return await super().claim_due(queue, limit, lease, worker_id=worker_id)


# --- cancel --------------------------------------------------------------------------------


class CancelLeavesTasksDue(_Broken):
    """Marks tasks CANCELLED but leaves their place in the due index."""

    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        with self._state.lock:
            before = {i: r.version for i, r in self._state.tasks.items()}
            count = await super().cancel(queue, task_ids)
            for task_id, version in before.items():
                record = self.record(task_id)
                if record is not None and record.task.status == Status.CANCELLED:
                    record.version = version
        return count


class CancelLetsTheHolderFinish(_Broken):
    """Cancels an IN_FLIGHT task only on paper: the holder's token still resolves it."""

    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        with self._state.lock:
            held = {
                i: (r.token, r.task.lease_expires_at, r.task.claimed_at)
                for i, r in self._state.tasks.items()
                if r.task.status == Status.IN_FLIGHT
            }
            count = await super().cancel(queue, task_ids)
            for task_id, (token, lease, claimed_at) in held.items():
                record = self.record(task_id)
                if record is not None and record.task.status == Status.CANCELLED:
                    record.token = token
                    record.task.lease_expires_at, record.task.claimed_at = lease, claimed_at
        return count

    def _fenced(self, task_id: str, token: str) -> Record:
        record = self.record(task_id)
        if record is not None and record.task.status == Status.CANCELLED:
            if record.token != token:
                raise StaleClaim(task_id)
            return record
        return super()._fenced(task_id, token)


class CancelKeepsTheLeaseRunning(_Broken):
    """A cancelled IN_FLIGHT task comes back once its old lease passes."""

    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        with self._state.lock:
            leases = {
                i: r.task.lease_expires_at
                for i, r in self._state.tasks.items()
                if r.task.status == Status.IN_FLIGHT
            }
            count = await super().cancel(queue, task_ids)
            for task_id, lease in leases.items():
                record = self.record(task_id)
                if record is not None and record.task.status == Status.CANCELLED and lease:
                    heap = self._state.index(queue).due.setdefault(record.task.priority, [])
                    heapq.heappush(heap, (lease, task_id, record.version))
        return count


class CancelsFinishedTasks(_Broken):
    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        count = await super().cancel(queue, task_ids)
        with self._state.lock:
            for task_id in task_ids:
                record = self.record(task_id)
                if record is not None and record.task.status in (Status.SUCCEEDED, Status.DEAD):
                    self._state.remove_dead(record.task)
                    record.task.status = Status.CANCELLED
                    record.task.cancelled_at = self._clock_now()
                    count += 1
        return count


class CountsEveryListedId(_Broken):
    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        count = await super().cancel(queue, task_ids)
        return count + len(task_ids) - len(set(task_ids))


class PurgeByIdsKeepsCancelledTasks(_Broken):
    async def _purge(self, queue: str, selector: Selector) -> int:
        with self._state.lock:
            selected = self._state.select(queue, selector, (Status.DEAD,))
            for record in selected:
                self._state.delete(record)
            return len(selected)


class PurgeByFilterDeletesCancelledTasks(_Broken):
    async def purge(self, queue: str, selector: Selector) -> int:
        count = await super().purge(queue, selector)
        if selector.filter is not None:
            with self._state.lock:
                for record in self._state.of_queue(queue):
                    if record.task.status == Status.CANCELLED:
                        self._state.delete(record)
                        count += 1
        return count


class PurgeSucceededKeepsCancelledTasks(_Broken):
    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        with self._state.lock:
            cancelled = [
                r for r in self._state.of_queue(queue) if r.task.status == Status.CANCELLED
            ]
            for record in cancelled:
                record.task.status = Status.DEAD  # hide them for a moment (not in the DLQ index)
            try:
                return await super().purge_succeeded(queue, older_than)
            finally:
                for record in cancelled:
                    record.task.status = Status.CANCELLED


class StatsCountCancelledTasksAsPending(_Broken):
    async def stats(self, queue: str) -> Stats:
        stats = await super().stats(queue)
        return msgspec.structs.replace(stats, pending=stats.pending + stats.cancelled, cancelled=0)


class RedrivesCancelledTasks(_Broken):
    async def redrive(self, queue: str, selector: Selector) -> int:
        count = await super().redrive(queue, selector)
        with self._state.lock:
            for task_id in selector.ids or []:
                record = self.record(task_id)
                if record is not None and record.task.status == Status.CANCELLED:
                    record.task.status = Status.PENDING
                    record.task.next_attempt_at = self._clock_now()
                    record.bump()
                    self._state.schedule(record)
                    count += 1
        return count


class CancelSkipsMalformedIds(_Broken):
    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        good = []
        for task_id in task_ids[: bounds.MAX_SELECTOR_IDS]:
            try:
                good.append(bounds.check_task_id(task_id))
            except Exception:
                continue
        return await super().cancel(queue, good)


class CancelAcceptsAnyQueueName(_Broken):
    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        try:
            bounds.check_queue(queue)
        except Exception:
            return 0
        return await super().cancel(queue, task_ids)


# --- DLQ groups ----------------------------------------------------------------------------


class GroupsByTheFirstErrorType(_Broken):
    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        with self._state.lock:
            saved = {}
            for record in self._state.of_queue(queue):
                if record.task.status == Status.DEAD and record.task.attempts:
                    saved[record.task.id] = record.task.attempts
                    record.task.attempts = [*record.task.attempts[1:], record.task.attempts[0]]
            try:
                return await super().dlq_groups(queue)
            finally:
                for task_id, attempts in saved.items():
                    record = self.record(task_id)
                    assert record is not None
                    record.task.attempts = attempts


class GroupsWithNoneFirst(_Broken):
    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        groups = await super().dlq_groups(queue)
        return sorted(
            groups,
            key=lambda g: (-g.count, g.handler_ref, g.error_type is not None, g.error_type or ""),
        )


class GroupsOrderedByUtf16(_Broken):
    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        groups = await super().dlq_groups(queue)

        def utf16(text: str) -> bytes:
            return text.encode("utf-16-be")

        return sorted(
            groups,
            key=lambda g: (
                -g.count,
                utf16(g.handler_ref),
                g.error_type is None,
                utf16(g.error_type or ""),
            ),
        )


class GroupsTimedByCreation(_Broken):
    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        groups = await super().dlq_groups(queue)
        with self._state.lock:
            created = [r.task.created_at for r in self._state.of_queue(queue) if r.task.created_at]
        first = min(created) if created else None
        return [
            msgspec.structs.replace(g, first_dead_lettered_at=first or g.first_dead_lettered_at)
            for g in groups
        ]


class GroupsEveryStatus(_Broken):
    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        groups = await super().dlq_groups(queue)
        with self._state.lock:
            live = [r.task for r in self._state.of_queue(queue) if r.task.status != Status.DEAD]
        for task in live:
            at = task.created_at or self._clock_now()
            groups.append(
                DLQGroup(
                    handler_ref=task.handler_ref,
                    error_type=None,
                    count=1,
                    first_dead_lettered_at=at,
                    last_dead_lettered_at=at,
                )
            )
        return groups


# --- listing -------------------------------------------------------------------------------


class ListsTasksById(_Broken):
    """Lists a status in id order, not by status time."""

    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        tasks, _ = await super().list_tasks(
            queue, task_filter, msgspec.structs.replace(page, limit=bounds.MAX_LIMIT, cursor=None)
        )
        tasks.sort(key=lambda t: t.id)
        return _offset_page(tasks, queue, task_filter, page)


def _offset_page(
    tasks: list[Envelope], queue: str, task_filter: TaskFilter, page: Page
) -> tuple[list[Envelope], str | None]:
    """Page ``tasks`` by position: the cursor holds an offset (bound to the right scope)."""
    start = 0
    if page.cursor is not None:
        start = int(KeysetCursor.decode(page.cursor, task_scope(queue, task_filter)).id)
    chunk = tasks[start : start + page.limit]
    if start + page.limit >= len(tasks):
        return chunk, None
    at = chunk[-1].created_at or datetime.now().astimezone()
    cursor = KeysetCursor.after(task_scope(queue, task_filter), at, str(start + page.limit))
    return chunk, cursor.encode()


class ListsTasksByOffset(_Broken):
    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        tasks, _ = await super().list_tasks(
            queue, task_filter, msgspec.structs.replace(page, limit=bounds.MAX_LIMIT, cursor=None)
        )
        return _offset_page(tasks, queue, task_filter, page)


class TaskListLastPageHasACursor(_Broken):
    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        tasks, cursor = await super().list_tasks(queue, task_filter, page)
        if cursor is None and tasks and len(tasks) == page.limit:
            last = tasks[-1]
            at = last.next_attempt_at or last.created_at
            assert at is not None
            cursor = KeysetCursor.after(task_scope(queue, task_filter), at, last.id).encode()
        return tasks, cursor


class TaskListAlwaysIncludesAttempts(_Broken):
    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        page = msgspec.structs.replace(page, include_attempts=True)
        return await super().list_tasks(queue, task_filter, page)


class TaskCursorsIgnoreTheirScope(_Broken):
    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        if page.cursor is not None:
            try:
                raw = _b64(page.cursor)
                cursor = msgspec.json.decode(raw, type=KeysetCursor)
            except (ValueError, msgspec.DecodeError):
                pass
            else:
                mine = KeysetCursor.after(task_scope(queue, task_filter), cursor.at, cursor.id)
                page = msgspec.structs.replace(page, cursor=mine.encode())
        return await super().list_tasks(queue, task_filter, page)


class TaskFilterAfterIsExclusive(_Broken):
    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        tasks, cursor = await super().list_tasks(queue, task_filter, page)
        if task_filter.after is not None:
            tasks = [t for t in tasks if _status_time(t) != task_filter.after]
        return tasks, cursor


class TaskListSkipsTheFilterCheck(_Broken):
    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        if task_filter.after is not None and task_filter.after.tzinfo is None:
            return [], None
        return await super().list_tasks(queue, task_filter, page)


class ListQueuesKeepsEmptiedQueues(_Broken):
    async def list_queues(self) -> list[Stats]:
        self._check_open()
        with self._state.lock:
            now = self._clock_now()
            return [self._state.stats(name, now) for name in sorted(self._state.queues)]


# --- import --------------------------------------------------------------------------------


class ImportStampsCreatedAt(_Broken):
    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        flags = await super().import_tasks(tasks)
        with self._state.lock:
            for task, stored in zip(tasks, flags, strict=True):
                record = self.record(task.id)
                if stored and record is not None:
                    record.task.created_at = self._clock_now()
        return flags


class ImportedInFlightTasksAreNeverReclaimed(_Broken):
    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        flags = await super().import_tasks(tasks)
        with self._state.lock:
            for task in tasks:
                record = self.record(task.id)
                if record is not None and record.task.status == Status.IN_FLIGHT:
                    record.bump()
        return flags


class ImportedPendingTasksAreNeverDue(_Broken):
    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        flags = await super().import_tasks(tasks)
        with self._state.lock:
            for task in tasks:
                record = self.record(task.id)
                if record is not None and record.task.status == Status.PENDING:
                    record.bump()
        return flags


class ImportOverwrites(_Broken):
    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        with self._state.lock:
            for task in tasks:
                record = self.record(task.id)
                if record is not None and record.task.queue == task.queue:
                    self._state.delete(record)
        return await super().import_tasks(tasks)


class ImportStoresTasksBeforeAConflict(_Broken):
    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        flags = []
        for task in tasks:
            flags += await super().import_tasks([task])
        return flags


class ImportChecksOnlyTheEnvelope(_Broken):
    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        for task in tasks:
            bounds.check_task(task)
        stored = []
        with self._state.lock:
            for task in tasks:
                new = self.record(task.id) is None
                if new:
                    copy = msgspec.structs.replace(task, attempts=list(task.attempts))
                    self._state.tasks[task.id] = Record(copy)
                    self._state.index(task.queue).ids.add(task.id)
                stored.append(new)
        return stored


# --- audit ---------------------------------------------------------------------------------


class AuditDropsTheReason(_Broken):
    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        return await super().append_audit(msgspec.structs.replace(entry, reason=None))


class AuditListsOldestFirst(_Broken):
    async def list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        entries, _ = await super().list_audit(
            audit_filter, msgspec.structs.replace(page, limit=bounds.MAX_LIMIT, cursor=None)
        )
        entries.reverse()
        start = int(page.cursor) if page.cursor else 0
        chunk = entries[start : start + page.limit]
        more = start + page.limit < len(entries)
        return chunk, str(start + page.limit) if more else None


class AuditBeforeIsInclusive(_Broken):
    async def list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        if audit_filter is not None and audit_filter.before is not None:
            bound = audit_filter.before + timedelta(microseconds=1)
            audit_filter = msgspec.structs.replace(audit_filter, before=bound)
        return await super().list_audit(audit_filter, page)


class AuditPagesByOffset(_Broken):
    async def list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        entries, _ = await super().list_audit(
            audit_filter, msgspec.structs.replace(page, limit=bounds.MAX_LIMIT, cursor=None)
        )
        scope = audit_scope(audit_filter)
        start = int(KeysetCursor.decode(page.cursor, scope).id) if page.cursor else 0
        chunk = entries[start : start + page.limit]
        if start + page.limit >= len(entries):
            return chunk, None
        at = chunk[-1].time
        assert at is not None
        return chunk, KeysetCursor.after(scope, at, str(start + page.limit)).encode()


class AuditCursorsIgnoreTheirFilter(_Broken):
    async def list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        if page.cursor is not None:
            try:
                cursor = msgspec.json.decode(_b64(page.cursor), type=KeysetCursor)
            except (ValueError, msgspec.DecodeError):
                pass
            else:
                mine = KeysetCursor.after(audit_scope(audit_filter), cursor.at, cursor.id)
                page = msgspec.structs.replace(page, cursor=mine.encode())
        return await super().list_audit(audit_filter, page)


class AuditAcceptsAnyEntry(_Broken):
    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        try:
            bounds.check_audit_entry(entry)
        except Exception:
            return msgspec.structs.replace(entry, id="unchecked", time=self._clock_now())
        return await super().append_audit(entry)


# --- the clock and the lifecycle -----------------------------------------------------------


class NowRunsAnHourBehind(_Broken):
    async def now(self) -> datetime:
        return await super().now() - timedelta(hours=1)


class WorksBeforeConnect(_Broken):
    def _check_open(self) -> None:
        if self._closed:
            raise NotConnected(type(self).__name__, closed=True)


class WorksAfterAclose(_Broken):
    def _check_open(self) -> None:
        if not self._opened and not self._closed:
            raise NotConnected(type(self).__name__)


class RefusesTheTimeoutOption(_Broken):
    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryStorage:
        if "timeout=" in url:
            raise ConfigError("unknown URL option 'timeout'", key="timeout")
        return super().from_url(url, **options)


class IgnoresABadTimeout(_Broken):
    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryStorage:
        return super().from_url(url.split("?", 1)[0], **options)


# --- corrupt tasks -------------------------------------------------------------------------


class GetRaisesOnACorruptTask(_Broken):
    async def get(self, task_id: str) -> Envelope:
        record = self.record(task_id)
        if record is not None and record.raw is not None:
            raise StorageError(f"cannot decode task {task_id!r}")
        return await super().get(task_id)


class ClaimRaisesAfterClaimingACorruptTask(_Broken):
    """Commits the whole batch, then fails decoding one task of it (every task of the
    batch stays leased and is never run)."""

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        claimed = await super().claim_due(queue, limit, lease, worker_id=worker_id)
        if any(c.task.corrupt for c in claimed):
            raise StorageError("cannot decode a claimed task")
        return claimed


class DlqListSkipsCorruptTasks(_Broken):
    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        tasks, cursor = await super().dlq_list(queue, dlq_filter, page)
        return [t for t in tasks if t.corrupt is None], cursor


class ReclaimOfACorruptTaskFails(_Broken):
    """Cannot append a LEASE_EXPIRED record to a corrupt task: the claim statement fails,
    and since that task is the oldest due, the whole queue stops."""

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        with self._state.lock:
            now = self._clock_now()
            for record in self._state.of_queue(queue):
                task = record.task
                if (
                    record.raw is not None
                    and task.status == Status.IN_FLIGHT
                    and task.lease_expires_at is not None
                    and task.lease_expires_at <= now
                ):
                    raise StorageError("invalid input syntax for type json")
        return await super().claim_due(queue, limit, lease, worker_id=worker_id)


class CancelSkipsCorruptTasks(_Broken):
    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        keep = [i for i in task_ids if (r := self.record(i)) is None or r.raw is None]
        return await super().cancel(queue, keep)


class EnqueueKeepsTheCallersClaimant(_Broken):
    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        stored = await super().enqueue(task, delay=delay)
        record = self.record(task.id)
        if stored and record is not None:
            record.task.claimed_by = task.claimed_by
        return stored


# --- helpers -------------------------------------------------------------------------------


def _read(record: Record) -> Envelope:
    from rdq_memory._codec import read

    return read(record)


def _b64(token: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


def _status_time(task: Envelope) -> datetime | None:
    from rdq.spi import status_time

    return status_time(task)


BROKEN_STORES: dict[type[MemoryStorage], list[str]] = {
    IgnoresPriority: [
        "test_claim_order_is_highest_priority_first_then_oldest_due_within_a_priority"
    ],
    StopsAtTheFirstPriorityNotYetDue: [
        "test_a_lower_priority_task_is_claimed_while_a_higher_one_is_not_yet_due"
    ],
    ReclaimsLapsedLeasesLast: ["test_a_lapsed_lease_is_reclaimed_in_its_priority_order"],
    TakesTheLeastUrgentTasksWhenContended: [
        "test_racing_claimants_never_double_claim_and_each_takes_tasks_in_priority_order"
    ],
    RedriveResetsThePriority: [
        "test_priority_stays_with_the_task_through_claim_reschedule_and_redrive"
    ],
    AcceptsAnyPriority: ["test_enqueue_with_a_priority_out_of_range_raises_validation_error"],
    DropsThePriority: ["test_round_trip_keeps_every_envelope_field"],
    ForgetsTheClaimant: ["test_claim_records_the_claimant_and_the_claim_time_by_the_storage_clock"],
    CompleteKeepsTheClaimant: ["test_every_resolution_clears_the_claimant_and_the_claim_time"],
    ReclaimKeepsTheFirstClaimant: ["test_a_reclaim_replaces_the_claimant_and_the_claim_time"],
    LeaseExpiredRecordNamesTheNewClaimant: [
        "test_lease_expired_record_names_the_lapsed_holder_its_claim_and_the_reclaim_time"
    ],
    LeaseExpiredRecordInventsAWorker: [
        "test_lease_expired_record_of_an_anonymous_holder_has_no_worker_id"
    ],
    AcceptsAnyWorkerId: ["test_claim_due_with_a_bad_worker_id_raises_validation_error"],
    EnqueueKeepsTheCallersClaimant: ["test_enqueue_sets_the_fields_the_store_owns"],
    CancelLeavesTasksDue: ["test_cancel_makes_a_pending_task_cancelled_and_it_is_never_claimed"],
    CancelLetsTheHolderFinish: ["test_cancel_of_an_in_flight_task_makes_its_holders_token_stale"],
    CancelKeepsTheLeaseRunning: [
        "test_a_cancelled_in_flight_task_is_not_claimed_once_its_old_lease_has_passed"
    ],
    CancelsFinishedTasks: ["test_cancel_ignores_finished_tasks_other_queues_and_unknown_ids"],
    CountsEveryListedId: ["test_cancel_counts_an_id_given_twice_once"],
    PurgeByIdsKeepsCancelledTasks: ["test_purge_by_ids_deletes_cancelled_tasks"],
    PurgeByFilterDeletesCancelledTasks: ["test_purge_by_filter_leaves_cancelled_tasks_alone"],
    PurgeSucceededKeepsCancelledTasks: [
        "test_purge_succeeded_deletes_tasks_cancelled_before_the_cutoff"
    ],
    StatsCountCancelledTasksAsPending: [
        "test_stats_count_cancelled_tasks_apart_from_every_other_status"
    ],
    RedrivesCancelledTasks: ["test_a_cancelled_task_is_not_in_the_dlq_and_is_not_redriven"],
    CancelSkipsMalformedIds: [
        "test_cancel_with_bad_ids_raises_validation_error_and_changes_nothing"
    ],
    CancelAcceptsAnyQueueName: ["test_every_queue_operation_rejects_a_bad_queue_name[cancel]"],
    GroupsByTheFirstErrorType: ["test_dlq_groups_count_dead_tasks_by_handler_and_last_error_type"],
    GroupsWithNoneFirst: [
        "test_dlq_groups_come_largest_first_then_by_handler_then_error_type_none_last"
    ],
    GroupsOrderedByUtf16: ["test_dlq_groups_of_one_size_order_their_names_by_code_point"],
    GroupsTimedByCreation: ["test_dlq_groups_equal_the_groups_computed_from_dlq_list"],
    GroupsEveryStatus: ["test_dlq_groups_of_a_queue_without_dead_tasks_is_empty"],
    ListsTasksById: [
        "test_list_tasks_lists_one_status_by_status_time_then_id[PENDING]",
        "test_list_tasks_lists_one_status_by_status_time_then_id[IN_FLIGHT]",
    ],
    ListsTasksByOffset: ["test_list_tasks_pages_never_skip_or_repeat_while_tasks_arrive"],
    TaskListLastPageHasACursor: [
        "test_list_tasks_last_page_has_no_cursor_and_an_empty_status_is_one_empty_page"
    ],
    TaskListAlwaysIncludesAttempts: ["test_list_tasks_omits_attempts_unless_asked"],
    TaskCursorsIgnoreTheirScope: [
        "test_list_tasks_with_a_malformed_or_foreign_cursor_raises_stale_cursor"
    ],
    TaskFilterAfterIsExclusive: [
        "test_list_tasks_filters_by_handler_ref_error_type_and_status_time"
    ],
    TaskListSkipsTheFilterCheck: [
        "test_list_tasks_with_a_bad_page_or_filter_raises_validation_error"
    ],
    ListQueuesKeepsEmptiedQueues: [
        "test_list_queues_gives_every_queue_holding_a_task_by_name_with_its_stats"
    ],
    ImportStampsCreatedAt: ["test_import_stores_a_task_of_every_status_verbatim"],
    ImportedInFlightTasksAreNeverReclaimed: [
        "test_an_imported_in_flight_task_is_reclaimed_once_its_lease_has_passed"
    ],
    ImportedPendingTasksAreNeverDue: [
        "test_imported_pending_and_dead_tasks_can_be_claimed_and_redriven"
    ],
    ImportOverwrites: ["test_import_is_idempotent_by_id"],
    ImportStoresTasksBeforeAConflict: ["test_import_with_an_id_conflict_stores_nothing"],
    ImportChecksOnlyTheEnvelope: [
        "test_import_of_a_corrupt_or_incomplete_task_raises_validation_error"
    ],
    AuditDropsTheReason: [
        "test_append_audit_keeps_the_entry_and_stamps_a_unique_id_and_the_storage_time"
    ],
    AuditListsOldestFirst: ["test_list_audit_lists_newest_first"],
    AuditBeforeIsInclusive: ["test_list_audit_filters_by_queue_action_actor_and_time"],
    AuditPagesByOffset: ["test_list_audit_pages_never_skip_or_repeat_while_entries_are_appended"],
    AuditCursorsIgnoreTheirFilter: [
        "test_list_audit_with_a_malformed_or_foreign_cursor_raises_stale_cursor"
    ],
    AuditAcceptsAnyEntry: [
        "test_append_audit_with_a_bad_entry_raises_validation_error_and_stores_nothing"
    ],
    NowRunsAnHourBehind: ["test_now_is_the_clock_the_store_claims_and_resolves_by"],
    WorksBeforeConnect: ["test_every_operation_before_connect_raises_not_connected"],
    WorksAfterAclose: [
        "test_every_operation_after_aclose_raises_not_connected_and_connect_reopens"
    ],
    RefusesTheTimeoutOption: ["test_the_operation_timeout_is_accepted_as_a_url_option"],
    IgnoresABadTimeout: ["test_a_bad_operation_timeout_in_the_url_raises_config_error_naming_it"],
    GetRaisesOnACorruptTask: [
        "test_a_corrupt_task_is_read_back_with_corrupt_set_and_never_makes_a_read_raise"
    ],
    ClaimRaisesAfterClaimingACorruptTask: [
        "test_claim_due_returns_a_corrupt_task_beside_its_intact_neighbours"
    ],
    DlqListSkipsCorruptTasks: [
        "test_dead_letter_of_a_corrupt_task_puts_it_in_the_dlq_still_marked_corrupt"
    ],
    ReclaimOfACorruptTaskFails: ["test_a_corrupt_task_never_blocks_its_queue"],
    CancelSkipsCorruptTasks: ["test_cancel_and_purge_work_on_a_corrupt_task"],
}
"""Each broken store and the kit tests that must fail against it."""
