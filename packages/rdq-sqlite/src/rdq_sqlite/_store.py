"""``SqliteStorage``: the storage contract on one SQLite file, durable and embedded.

Each operation validates its input, then runs one function of :mod:`._writes` (inside one
``BEGIN IMMEDIATE`` transaction on the write connection) or of :mod:`._reads` (on the read
connection, which WAL lets run beside a write), on the connection's own thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import msgspec

from rdq.errors import NotFound, StaleClaim, StaleCursor, ValidationError
from rdq.spi import (
    AuditEntry,
    AuditFilter,
    Capabilities,
    Claimed,
    Completion,
    DLQCursor,
    DLQFilter,
    DLQGroup,
    Envelope,
    KeysetCursor,
    Page,
    Selector,
    Stats,
    Status,
    StorageBase,
    TaskFilter,
    audit_scope,
    limits,
    status_time,
    task_scope,
)
from rdq_sqlite import _reads, _writes
from rdq_sqlite._checks import check_resolution, check_sequence, check_timeout
from rdq_sqlite._codec import at_us, audit_seq, filter_params, to_us
from rdq_sqlite._connection import Link, Mode
from rdq_sqlite._migrate import LATEST, apply_migrations, check_version, create_if_empty
from rdq_sqlite._notify import doorbell, wait_until_due
from rdq_sqlite._queries import SQL
from rdq_sqlite._url import SqliteConfig, parse_url

__all__ = ["SqliteStorage"]

T = TypeVar("T")
_US = timedelta(microseconds=1)
_LOWEST = -(2**63)
_HIGHEST = 2**63 - 1
_PURGE_CHUNK = 2000
_MIGRATE_TIMEOUT = 300.0
_encode = msgspec.json.Encoder().encode


class SqliteStorage(StorageBase):
    """The SQLite store. Build it with :meth:`from_url`; ``connect`` opens the database
    (creating the file and its schema if the file does not exist yet)."""

    def __init__(self, config: SqliteConfig) -> None:
        self.config = config
        self._bell = doorbell(config.path)
        self._writer: Link | None = None
        self._reader: Link | None = None
        self._schema_ok = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqliteStorage:
        """Build a store for ``url``; query parameters and ``options`` set
        :class:`~rdq_sqlite.SqliteConfig` (``ConfigError`` names a bad one)."""
        return cls(parse_url(url, **options))

    def __repr__(self) -> str:
        return f"SqliteStorage({self.config.where!r})"

    @property
    def path(self) -> str | None:
        """The database file, or ``None`` for an in-memory database."""
        return self.config.path

    def reopen(self) -> SqliteStorage | None:
        """A second store on the same file, with connections of its own (``None`` for a
        private in-memory database, which no second connection reaches)."""
        return None if self.config.in_memory else SqliteStorage(self.config)

    def capabilities(self) -> Capabilities:
        return Capabilities(
            reopen=not self.config.in_memory,
            notify=self.config.notify,
            filter_pushdown=True,
            batch_enqueue=True,
            batch_complete=True,
            group_pushdown=True,
        )

    # --- lifecycle -------------------------------------------------------------------------

    async def _open(self) -> None:
        where = self.config.where
        writer = Link(self.config, "write")
        await writer.open()
        try:
            await writer.call(lambda conn: create_if_empty(conn, where), Mode.WRITE)
            reader = writer
            if not self.config.in_memory:
                reader = Link(self.config, "read", read_only=True)
                await reader.open()
        except BaseException:
            await writer.close()
            raise
        self._writer, self._reader = writer, reader
        self._schema_ok = False

    async def _close(self) -> None:
        writer, reader = self._writer, self._reader
        self._writer = self._reader = None
        if reader is not None and reader is not writer:
            await reader.close()
        if writer is not None:
            await writer.close()

    def _links(self) -> tuple[Link, Link]:
        if self._writer is None or self._reader is None:
            self._check_open()  # raises NotConnected
            raise RuntimeError("the store is open but has no connection")
        return self._writer, self._reader

    async def _ensure_schema(self, link: Link) -> None:
        if not self._schema_ok:
            where = self.config.where
            await link.call(lambda conn: check_version(conn, where), Mode.PLAIN)
            self._schema_ok = True

    async def _write(self, operation: Callable[..., T], *args: Any) -> T:
        writer, _ = self._links()
        await self._ensure_schema(writer)
        return await writer.call(lambda conn: operation(conn, *args), Mode.WRITE)

    async def _read(self, operation: Callable[..., T], *args: Any, snapshot: bool = False) -> T:
        _, reader = self._links()
        await self._ensure_schema(reader)
        mode = Mode.READ if snapshot else Mode.PLAIN
        return await reader.call(lambda conn: operation(conn, *args), mode)

    async def migrate(self) -> None:
        """Create or upgrade the schema (idempotent; concurrent migrators apply each
        migration once)."""
        self._check_open()
        writer, _ = self._links()
        where = self.config.where
        await writer.call(
            lambda conn: apply_migrations(conn, where), Mode.WRITE, timeout=_MIGRATE_TIMEOUT
        )
        self._schema_ok = False

    @property
    def schema_version(self) -> int:
        """The schema version this release uses."""
        return LATEST

    # --- admission -------------------------------------------------------------------------

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        self._check_open()
        return (await self._admit([task], delay))[0]

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        self._check_open()
        check_sequence(tasks)
        if not tasks:
            limits.check_delay(delay)
            return []
        return await self._admit(tasks, delay)

    async def _admit(self, tasks: Sequence[Envelope], delay: timedelta | None) -> list[bool]:
        limits.check_delay(delay)
        checked = [(limits.check_task(task), _payload(task)) for task in tasks]
        delay_us = 0 if delay is None else delay // _US
        flags = await self._write(_writes.enqueue, checked, delay_us)
        self._bell.ring(task.queue for task, stored in zip(tasks, flags, strict=True) if stored)
        return flags

    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        self._check_open()
        tasks = limits.check_imported_tasks(tasks)
        if not tasks:
            return []
        flags = await self._write(_writes.import_tasks, list(tasks))
        self._bell.ring(
            task.queue
            for task, stored in zip(tasks, flags, strict=True)
            if stored and task.status in (Status.PENDING, Status.IN_FLIGHT)
        )
        return flags

    async def put_corrupt_task(
        self, queue: str, task_id: str, raw: str = '{"id": ', *, kind: str = "undecodable"
    ) -> None:
        """Test hook: store a PENDING task of ``queue``, due now, as a hand edit would, whose
        payload column holds ``raw`` (JSON that does not decode), or, by ``kind``, JSON nested
        deeper than any decoder recurses (``"deep"``) or a ``created_at`` past the year 9999
        (``"far_time"``). The compliance kit's corrupt-task clauses use it."""
        self._check_open()
        limits.check_queue(queue)
        limits.check_task_id(task_id)
        created_us: int | None = None
        if kind == "deep":
            raw = "[" * 5000 + "]" * 5000
        elif kind == "far_time":
            raw, created_us = "null", 10**18  # about the year 33658
        elif kind != "undecodable":
            raise ValueError(f"unknown kind of corrupt task: {kind!r}")
        await self._write(_writes.put_corrupt, queue, task_id, raw, created_us)
        self._bell.ring([queue])

    # --- claiming --------------------------------------------------------------------------

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        self._check_open()
        limits.check_queue(queue)
        limits.check_worker_id(worker_id)
        limits.check_limit(limit)
        limits.check_lease(lease)
        return await self._write(_writes.claim, queue, limit, lease // _US, worker_id)

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        self._check_open()
        limits.check_task_id(task_id)
        limits.check_token(token)
        limits.check_lease(lease)
        return at_us(await self._write(_writes.extend_lease, task_id, token, lease // _US))

    # --- resolution ------------------------------------------------------------------------

    async def reschedule(self, task_id: str, token: str, attempt: Any, next_at: datetime) -> None:
        self._check_open()
        check_resolution(task_id, token, attempt)
        limits.check_aware(next_at, "next_at")
        queue = await self._write(
            _writes.resolve, SQL.reschedule, task_id, token, attempt, to_us(next_at)
        )
        self._bell.ring([queue])

    async def complete(self, task_id: str, token: str, attempt: Any) -> None:
        self._check_open()
        check_resolution(task_id, token, attempt)
        await self._write(_writes.resolve, SQL.complete, task_id, token, attempt)

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        self._check_open()
        for index, item in enumerate(completions):
            if not isinstance(item, Completion):
                raise ValidationError(
                    "must be an rdq.spi.Completion", field=f"completions[{index}]"
                )
            check_resolution(item.task_id, item.token, item.attempt)
        if not completions:
            return []
        return await self._write(_writes.complete_many, list(completions))

    async def dead_letter(self, task_id: str, token: str, attempt: Any) -> None:
        self._check_open()
        check_resolution(task_id, token, attempt)
        await self._write(_writes.resolve, SQL.dead_letter, task_id, token, attempt)

    # --- DLQ -------------------------------------------------------------------------------

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        self._check_open()
        limits.check_queue(queue)
        limits.check_page(page)
        if dlq_filter is not None:
            limits.check_filter(dlq_filter)
        after: tuple[int, str] | None = None
        if page.cursor is not None:
            cursor = DLQCursor.decode(page.cursor, queue, dlq_filter)
            after = (to_us(cursor.dead_lettered_at) or 0, cursor.id)
        f = dlq_filter or DLQFilter()
        tasks = await self._page(
            queue,
            Status.DEAD,
            filter_params(
                f.error_type,
                f.handler_ref,
                to_us(f.dead_lettered_after),
                to_us(f.dead_lettered_before),
            ),
            after,
            page,
        )
        if len(tasks) <= page.limit:
            return tasks, None
        del tasks[page.limit :]
        last = tasks[-1]
        at = last.dead_lettered_at or at_us(0)
        return tasks, DLQCursor.after(queue, dlq_filter, at, last.id).encode()

    async def _page(
        self,
        queue: str,
        status: Status,
        params: dict[str, Any],
        after: tuple[int, str] | None,
        page: Page,
    ) -> list[Envelope]:
        """Up to ``page.limit + 1`` tasks (one more tells whether another page follows).

        The filter's lower time bound becomes the keyset start when it lies beyond the
        cursor: ``(status_at, id) > (lo, "")`` holds exactly when ``status_at >= lo``."""
        start = (params.pop("lo"), "")
        if after is not None and after > start:
            start = after
        return await self._read(
            _reads.page,
            {
                "queue": queue,
                "status": str(status),
                "after_at": start[0],
                "after_id": start[1],
                "limit": page.limit + 1,
                "with_attempts": page.include_attempts,
                **params,
            },
        )

    async def get(self, task_id: str) -> Envelope:
        self._check_open()
        limits.check_task_id(task_id)
        task = await self._read(_reads.get, task_id)
        if task is None:
            raise NotFound(task_id)
        return task

    async def redrive(self, queue: str, selector: Selector) -> int:
        self._check_open()
        limits.check_queue(queue)
        limits.check_selector(selector)
        count = await self._write(_writes.redrive, queue, selector)
        if count:
            self._bell.ring([queue])
        return count

    async def purge(self, queue: str, selector: Selector) -> int:
        self._check_open()
        limits.check_queue(queue)
        limits.check_selector(selector)
        return await self._write(_writes.purge, queue, selector)

    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        self._check_open()
        limits.check_queue(queue)
        return await self._read(_reads.dlq_groups, queue)

    # --- every task ------------------------------------------------------------------------

    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        self._check_open()
        limits.check_queue(queue)
        limits.check_task_filter(task_filter)
        limits.check_page(page)
        scope = task_scope(queue, task_filter)
        after: tuple[int, str] | None = None
        if page.cursor is not None:
            cursor = KeysetCursor.decode(page.cursor, scope)
            after = (to_us(cursor.at) or 0, cursor.id)
        params = filter_params(
            task_filter.error_type,
            task_filter.handler_ref,
            to_us(task_filter.after),
            to_us(task_filter.before),
        )
        tasks = await self._page(queue, task_filter.status, params, after, page)
        if len(tasks) <= page.limit:
            return tasks, None
        del tasks[page.limit :]
        last = tasks[-1]
        at = _status_time(last)
        return tasks, KeysetCursor.after(scope, at, last.id).encode()

    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        self._check_open()
        limits.check_queue(queue)
        ids = limits.check_ids(task_ids)
        if not ids:
            return 0
        return await self._write(_writes.cancel, queue, ids)

    async def list_queues(self) -> list[Stats]:
        self._check_open()
        return await self._read(_reads.counts, None, snapshot=True)

    # --- audit trail -----------------------------------------------------------------------

    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        self._check_open()
        limits.check_audit_entry(entry)
        try:
            _encode(entry.selector)
        except (TypeError, msgspec.EncodeError) as exc:
            raise ValidationError(f"is not JSON-serializable: {exc}", "entry.selector") from None
        return await self._write(_writes.append_audit, entry)

    async def list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        self._check_open()
        if audit_filter is not None:
            limits.check_audit_filter(audit_filter)
        limits.check_page(page)
        scope = audit_scope(audit_filter)
        f = audit_filter or AuditFilter()
        lo, hi = to_us(f.after), to_us(f.before)
        # the filter's upper bound is the keyset start unless the cursor lies before it:
        # (time, seq) < (hi, 0) holds exactly when time < hi (seq counts from 1)
        before = (_HIGHEST if hi is None else hi, 0)
        if page.cursor is not None:
            cursor = KeysetCursor.decode(page.cursor, scope)
            seq = audit_seq(cursor.id)
            if seq is None:
                raise StaleCursor("malformed cursor")
            before = min(before, (to_us(cursor.at) or 0, seq))
        entries = await self._read(
            _reads.audit_page,
            {
                "before_at": before[0],
                "before_seq": before[1],
                "lo": _LOWEST if lo is None else lo,
                "queue": f.queue,
                "action": f.action,
                "actor": f.actor,
                "limit": page.limit + 1,
            },
        )
        if len(entries) <= page.limit:
            return entries, None
        del entries[page.limit :]
        last = entries[-1]
        if last.time is None or last.id is None:
            return entries, None
        return entries, KeysetCursor.after(scope, last.time, last.id).encode()

    # --- operations ------------------------------------------------------------------------

    async def now(self) -> datetime:
        self._check_open()
        return await self._read(_reads.now)

    async def stats(self, queue: str) -> Stats:
        self._check_open()
        limits.check_queue(queue)
        return (await self._read(_reads.counts, queue, snapshot=True))[0]

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        """Deletes in chunks of a few thousand tasks, one transaction each, so a large purge
        never holds the write lock for long."""
        self._check_open()
        limits.check_queue(queue)
        limits.check_aware(older_than, "older_than")
        before = to_us(older_than) or 0
        total = 0
        while True:
            count = await self._write(_writes.purge_finished, queue, before, _PURGE_CHUNK)
            total += count
            if count < _PURGE_CHUNK:
                return total

    async def wait_due(self, queue: str, timeout: float) -> bool:
        self._check_open()
        limits.check_queue(queue)
        if not self.config.notify:
            raise NotImplementedError("notify is turned off for this store (notify=false)")
        check_timeout(timeout)
        rung = self._bell.listen(queue)
        try:
            return await wait_until_due(
                lambda: self._read(_reads.next_due, queue),
                lambda: self._read(_reads.data_version),
                rung,
                timeout,
                None if self.config.in_memory else self.config.watch_interval,
            )
        finally:
            self._bell.forget(queue, rung)


def _payload(task: Envelope) -> str:
    """The payload as JSON (``check_task`` has already proved it encodes)."""
    return _encode(task.payload).decode()


def _status_time(task: Envelope) -> datetime:
    return status_time(task) or at_us(0)
