"""``MemoryStorage``: every rule of the storage contract, in process memory."""

from __future__ import annotations

import asyncio
import bisect
import heapq
import secrets
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from rdq.errors import ConfigError, IDConflict, NotFound, StaleClaim, ValidationError
from rdq.spi import (
    Attempt,
    Capabilities,
    Claimed,
    Completion,
    DLQCursor,
    DLQFilter,
    Envelope,
    Outcome,
    Page,
    Selector,
    Stats,
    Status,
    StorageBase,
    decode_envelope,
    encode_envelope,
    limits,
)
from rdq_memory._state import MemoryState, Record, Waiter

Clock = Callable[[], datetime]

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
    return timezone-aware datetimes."""

    def __init__(self, *, name: str | None = None, clock: Clock | None = None) -> None:
        if name:
            with _named_lock:
                self._state = _named.setdefault(name, MemoryState())
        else:
            self._state = MemoryState()
        self._name = name
        self._clock: Clock = clock or _utc_now

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryStorage:
        parts = urlsplit(url)
        if parts.scheme != "memory":
            raise ConfigError(f"not a memory:// URL: {url!r}", key="storage")
        name = (parts.netloc + parts.path).strip("/") or None
        unknown = set(options) - {"clock"}
        if unknown:
            raise ConfigError(f"unknown option(s) {sorted(unknown)}", key="storage")
        return cls(name=name, clock=options.get("clock"))

    def __repr__(self) -> str:
        return f"MemoryStorage(name={self._name!r})"

    def capabilities(self) -> Capabilities:
        return Capabilities(
            notify=True, filter_pushdown=True, batch_enqueue=True, batch_complete=True
        )

    def _now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ConfigError("the memory store's clock returned a naive datetime", key="clock")
        return now

    # --- admission -------------------------------------------------------------------------

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        return (await self.enqueue_batch([task], delay=delay))[0]

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        if delay is not None and (not isinstance(delay, timedelta) or delay < timedelta(0)):
            raise ValidationError("must be a non-negative timedelta", field="delay")
        copies = [_copy(limits.check_task(task)) for task in tasks]
        state = self._state
        with state.lock:
            now = self._now()
            seen: dict[str, str] = {}
            stored: list[bool] = []
            for task in copies:  # check every task before changing anything
                queue = seen.get(task.id)
                if queue is None and task.id in state.tasks:
                    queue = state.tasks[task.id].task.queue
                if queue is not None and queue != task.queue:
                    raise IDConflict(task.id, queue)
                stored.append(queue is None)
                seen[task.id] = task.queue
            woken: set[str] = set()
            for task, new in zip(copies, stored, strict=True):
                if not new:
                    continue
                task.status = Status.PENDING
                task.created_at = now
                if task.next_attempt_at is None:
                    task.next_attempt_at = now + (delay or timedelta(0))
                task.lease_expires_at = None
                task.completed_at = None
                task.dead_lettered_at = None
                record = Record(task)
                state.tasks[task.id] = record
                state.schedule(record)
                woken.add(task.queue)
            for queue in woken:
                state.wake(queue)
            return stored

    # --- claiming --------------------------------------------------------------------------

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        limits.check_queue(queue)
        limits.check_worker_id(worker_id)
        limits.check_limit(limit)
        limits.check_lease(lease)
        state = self._state
        claimed: list[Claimed] = []
        with state.lock:
            now = self._now()
            heap = state.index(queue).due
            while heap and len(claimed) < limit and heap[0][0] <= now:
                _, task_id, version = heapq.heappop(heap)
                record = state.tasks.get(task_id)
                if record is None or record.version != version:
                    continue  # a stale heap entry: the task changed since it was pushed
                task = record.task
                if task.status == Status.IN_FLIGHT:
                    task.attempts.append(
                        Attempt(
                            number=task.attempt_count + 1,
                            outcome=Outcome.LEASE_EXPIRED,
                            error_type="LeaseExpired",
                            error_message=(
                                f"lease expired at {_iso(task.lease_expires_at)} "
                                "before the attempt was resolved"
                            ),
                            started_at=record.claimed_at,
                            finished_at=now,
                        )
                    )
                    task.attempt_count += 1
                task.status = Status.IN_FLIGHT
                task.lease_expires_at = now + lease
                record.token = secrets.token_hex(16)
                record.claimed_at = now
                record.version += 1
                state.schedule(record)
                claimed.append(Claimed(_copy(task), record.token))
        return claimed

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        limits.check_task_id(task_id)
        limits.check_token(token)
        limits.check_lease(lease)
        state = self._state
        with state.lock:
            record = self._fenced(task_id, token)
            expires = self._now() + lease
            record.task.lease_expires_at = expires
            record.version += 1
            state.schedule(record)
            return expires

    # --- resolution ------------------------------------------------------------------------

    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        limits.check_aware(next_at, "next_at")
        state = self._state
        with state.lock:
            record = self._resolve(task_id, token, attempt)
            record.task.status = Status.PENDING
            record.task.next_attempt_at = next_at
            state.schedule(record)
            state.wake(record.task.queue)

    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        with self._state.lock:
            record = self._resolve(task_id, token, attempt)
            record.task.status = Status.SUCCEEDED
            record.task.completed_at = self._now()

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        for item in completions:  # validate every item before changing anything
            if not isinstance(item, Completion):
                raise ValidationError("must be rdq.spi.Completion items", field="completions")
            _check_resolution(item.task_id, item.token, item.attempt)
        results: list[StaleClaim | NotFound | None] = []
        with self._state.lock:
            now = self._now()
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

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        state = self._state
        with state.lock:
            record = self._resolve(task_id, token, attempt)
            record.task.status = Status.DEAD
            record.task.dead_lettered_at = self._now()
            state.add_dead(record.task)

    def _fenced(self, task_id: str, token: str) -> Record:
        record = self._state.tasks.get(task_id)
        if record is None:
            raise NotFound(task_id)
        if record.task.status != Status.IN_FLIGHT or record.token != token:
            raise StaleClaim(task_id)
        return record

    def _resolve(self, task_id: str, token: str, attempt: Attempt) -> Record:
        _check_resolution(task_id, token, attempt)
        record = self._fenced(task_id, token)
        task = record.task
        task.attempts.append(attempt)
        task.attempt_count += 1
        task.lease_expires_at = None
        record.token = None
        record.version += 1
        return record

    # --- DLQ -------------------------------------------------------------------------------

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        limits.check_queue(queue)
        limits.check_page(page)
        if dlq_filter is not None:
            limits.check_filter(dlq_filter)
        after: tuple[datetime, str] | None = None
        if page.cursor is not None:
            cursor = DLQCursor.decode(page.cursor, queue, dlq_filter)
            after = (cursor.dead_lettered_at, cursor.id)
        state = self._state
        out: list[Envelope] = []
        more = False
        with state.lock:
            for key in self._dead_after(queue, after):
                task = state.tasks[key[1]].task
                if dlq_filter is not None and not dlq_filter.matches(task):
                    continue
                if len(out) == page.limit:
                    more = True
                    break
                out.append(_copy(task))
        if not page.include_attempts:
            for task in out:
                task.attempts = []
        next_cursor = None
        if more and out:
            last = out[-1]
            assert last.dead_lettered_at is not None
            next_cursor = DLQCursor.after(queue, dlq_filter, last.dead_lettered_at, last.id)
        return out, next_cursor.encode() if next_cursor else None

    def _dead_after(
        self, queue: str, after: tuple[datetime, str] | None
    ) -> list[tuple[datetime, str]]:

        dlq = self._state.index(queue).dlq
        start = 0 if after is None else bisect.bisect_right(dlq, after)
        return dlq[start:]

    async def get(self, task_id: str) -> Envelope:
        limits.check_task_id(task_id)
        with self._state.lock:
            record = self._state.tasks.get(task_id)
            if record is None:
                raise NotFound(task_id)
            return _copy(record.task)

    async def redrive(self, queue: str, selector: Selector) -> int:
        limits.check_queue(queue)
        limits.check_selector(selector)
        state = self._state
        with state.lock:
            now = self._now()
            selected = self._select(queue, selector)
            for record in selected:
                task = record.task
                state.remove_dead(task)
                task.status = Status.PENDING
                task.attempt_count = 0
                task.redrive_count += 1
                task.next_attempt_at = now
                task.dead_lettered_at = None
                record.version += 1
                state.schedule(record)
            if selected:
                state.wake(queue)
            return len(selected)

    async def purge(self, queue: str, selector: Selector) -> int:
        limits.check_queue(queue)
        limits.check_selector(selector)
        state = self._state
        with state.lock:
            selected = self._select(queue, selector)
            for record in selected:
                state.remove_dead(record.task)
                del state.tasks[record.task.id]
            return len(selected)

    def _select(self, queue: str, selector: Selector) -> list[Record]:
        state = self._state
        if selector.ids is not None:
            records = (state.tasks.get(task_id) for task_id in dict.fromkeys(selector.ids))
            return [
                r
                for r in records
                if r is not None and r.task.queue == queue and r.task.status == Status.DEAD
            ]
        assert selector.filter is not None
        dlq_filter = selector.filter
        return [
            state.tasks[task_id]
            for _, task_id in state.index(queue).dlq
            if dlq_filter.matches(state.tasks[task_id].task)
        ]

    # --- operations ------------------------------------------------------------------------

    async def stats(self, queue: str) -> Stats:
        limits.check_queue(queue)
        state = self._state
        counts = dict.fromkeys(Status, 0)
        oldest_due: datetime | None = None
        with state.lock:
            now = self._now()
            for record in state.tasks.values():
                task = record.task
                if task.queue != queue:
                    continue
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
            oldest_pending_age=(now - oldest_due).total_seconds() if oldest_due else None,
            as_of=now,
        )

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        limits.check_queue(queue)
        limits.check_aware(older_than, "older_than")
        state = self._state
        with state.lock:
            doomed = [
                task_id
                for task_id, record in state.tasks.items()
                if record.task.queue == queue
                and record.task.status == Status.SUCCEEDED
                and record.task.completed_at is not None
                and record.task.completed_at < older_than
            ]
            for task_id in doomed:
                del state.tasks[task_id]
            return len(doomed)

    async def wait_due(self, queue: str, timeout: float) -> bool:
        limits.check_queue(queue)
        if timeout < 0:
            raise ValidationError("must not be negative", field="timeout")
        state = self._state
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        with state.lock:
            now = self._now()
            next_due = self._next_due(queue)
            if next_due is not None and next_due <= now:
                return True
            wait = timeout
            if next_due is not None:
                wait = min(wait, (next_due - now).total_seconds())
            waiter = Waiter(loop, future)
            state.waiters.setdefault(queue, []).append(waiter)
        try:
            return await asyncio.wait_for(future, wait)
        except TimeoutError:
            return next_due is not None and wait < timeout
        finally:
            with state.lock:
                waiters = state.waiters.get(queue)
                if waiters and waiter in waiters:
                    waiters.remove(waiter)

    def _next_due(self, queue: str) -> datetime | None:
        """The earliest due time of a live heap entry of ``queue`` (prunes stale entries)."""
        state = self._state
        heap = state.index(queue).due
        while heap:
            due, task_id, version = heap[0]
            record = state.tasks.get(task_id)
            if record is not None and record.version == version:
                return due
            heapq.heappop(heap)
        return None


def _check_resolution(task_id: str, token: str, attempt: Attempt) -> None:
    limits.check_task_id(task_id)
    limits.check_token(token)
    if not isinstance(attempt, Attempt):
        raise ValidationError("must be an rdq.spi.Attempt", field="attempt")


def _copy(task: Envelope) -> Envelope:
    """An independent copy, made through the wire codec as a real backend would."""
    return decode_envelope(encode_envelope(task))


def _iso(at: datetime | None) -> str:
    return at.isoformat() if at else "?"
