"""``SqliteStorage``: the storage contract on one SQLite file, durable and embedded.

:class:`~rdq.spi.StorageBase` checks that the store is open and validates every argument;
each ``_operation`` here runs one function, on the link's own thread, and rings the doorbell
(:mod:`._notify`) for the queues a write made due. Writes run inside one ``BEGIN IMMEDIATE``
transaction on the write link: :mod:`._admission` (admission), :mod:`._claims` (claims),
:mod:`._controls` (control records, ``retry_now``), :mod:`._fleet` (the worker registry and
counts), :mod:`._retention` (what leaves the store) and :mod:`._writes` (the rest); reads on
the read link, which WAL lets run beside a write: :mod:`._pages`, :mod:`._reads`,
:mod:`._notify`, and the reads of :mod:`._controls` and :mod:`._fleet`.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Concatenate, ParamSpec, TypeVar

import msgspec

from rdq.errors import NotFound, StaleClaim, Unsupported, ValidationError
from rdq.spi import (
    CONTRACT_VERSION,
    Admitted,
    Attempt,
    AuditEntry,
    AuditFilter,
    Backup,
    Capabilities,
    Claimed,
    Completion,
    Control,
    Counts,
    Dedup,
    DLQFilter,
    DLQGroup,
    Envelope,
    Page,
    Selector,
    Stats,
    Status,
    StorageBase,
    TaskFilter,
    WorkerInfo,
)
from rdq_sqlite import (
    _admission,
    _backup,
    _claims,
    _controls,
    _fleet,
    _notify,
    _pages,
    _reads,
    _retention,
    _writes,
)
from rdq_sqlite._codec import at_us, to_us
from rdq_sqlite._connection import Link, Mode
from rdq_sqlite._migrate import LATEST, apply_migrations, check_version, create_if_empty
from rdq_sqlite._queries import SQL
from rdq_sqlite._url import SqliteConfig, parse_url

__all__ = ["SqliteStorage"]

P = ParamSpec("P")
T = TypeVar("T")
Operation = Callable[Concatenate[sqlite3.Connection, P], T]

_US = timedelta(microseconds=1)
_PURGE_CHUNK = 2000
_MIGRATE_TIMEOUT = 300.0
_encode = msgspec.json.Encoder().encode


class SqliteStorage(StorageBase):
    """The SQLite store. Build it with :meth:`from_url`; ``connect`` opens the database
    (creating the file and its schema if the file does not exist yet)."""

    def __init__(self, config: SqliteConfig) -> None:
        self.config = config
        self._bell = _notify.doorbell(config.path)
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

    @property
    def schema_version(self) -> int:
        """The schema version this release uses."""
        return LATEST

    def reopen(self) -> SqliteStorage | None:
        """A second store on the same file, with connections of its own (``None`` for a
        private in-memory database, which no second connection reaches)."""
        return None if self.config.in_memory else SqliteStorage(self.config)

    def capabilities(self) -> Capabilities:
        """Everything the contract offers but ``enqueue_in``; ``notify`` unless the URL turns
        it off, ``reopen`` unless the database is in memory."""
        return Capabilities(
            contract_version=CONTRACT_VERSION,
            notify=self.config.notify,
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
            reopen=not self.config.in_memory,
            control=True,
            worker_registry=True,
            counters=True,
            discard_succeeded=True,
            backup=True,
            fair_shares=True,
            priority_aging=True,
            retention=True,
            dedup=True,
            payload_refs=True,
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

    async def _write(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``operation(conn, ...)`` inside one write transaction on the write link."""
        writer, _ = self._links()
        await self._ensure_schema(writer)
        return await writer.call(lambda conn: operation(conn, *args, **kwargs), Mode.WRITE)

    async def _read(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``operation(conn, ...)`` on the read link, statement by statement."""
        _, reader = self._links()
        await self._ensure_schema(reader)
        return await reader.call(lambda conn: operation(conn, *args, **kwargs), Mode.PLAIN)

    async def _snapshot(self, operation: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``operation(conn, ...)`` on the read link, in one read transaction."""
        _, reader = self._links()
        await self._ensure_schema(reader)
        return await reader.call(lambda conn: operation(conn, *args, **kwargs), Mode.READ)

    async def _backup(self, target: str, overwrite: bool) -> Backup:
        """A checked copy of the database at ``target`` (see :mod:`._backup`), written on a
        connection of its own so the store's reads go on beside it (an in-memory database has
        only its one connection)."""
        began = time.monotonic()
        writer, _ = self._links()
        await self._ensure_schema(writer)
        path = await asyncio.to_thread(_backup.check_target, target, self.config.path, overwrite)
        partial = _backup.partial_of(path)
        link = writer if self.config.in_memory else Link(self.config, "backup")
        try:
            if link is not writer:
                await link.open()
            version = await link.call(
                lambda conn: _backup.write_copy(conn, partial), Mode.PLAIN, timeout=None
            )
        except BaseException:
            await asyncio.to_thread(partial.unlink, missing_ok=True)
            raise
        finally:
            if link is not writer:
                await link.close()
        tasks, checks = await asyncio.to_thread(_backup.verify, partial, version)
        size = await asyncio.to_thread(_backup.place, partial, path, overwrite)
        return Backup(
            target=str(path),
            size=size,
            tasks=tasks,
            checks=checks,
            seconds=time.monotonic() - began,
        )

    async def _migrate(self) -> list[str]:
        """Create or upgrade the schema (idempotent; concurrent migrators apply each
        migration once); the migrations applied, by file name (``0001_schema``)."""
        writer, _ = self._links()
        where = self.config.where
        applied = await writer.call(
            lambda conn: apply_migrations(conn, where), Mode.WRITE, timeout=_MIGRATE_TIMEOUT
        )
        self._schema_ok = False
        return applied

    # --- admission -------------------------------------------------------------------------

    async def _enqueue(self, task: Envelope, delay: timedelta | None) -> bool:
        return (await self._enqueue_batch([task], delay))[0]

    async def _enqueue_batch(self, tasks: list[Envelope], delay: timedelta | None) -> list[bool]:
        delay_us = 0 if delay is None else delay // _US
        flags = await self._write(_admission.enqueue, tasks, delay_us)
        self._bell.ring(task.queue for task, stored in zip(tasks, flags, strict=True) if stored)
        return flags

    async def _import_tasks(self, tasks: list[Envelope]) -> list[bool]:
        flags = await self._write(_admission.import_tasks, tasks)
        self._bell.ring(
            task.queue
            for task, stored in zip(tasks, flags, strict=True)
            if stored and task.status in (Status.PENDING, Status.IN_FLIGHT)
        )
        return flags

    # --- claiming --------------------------------------------------------------------------

    async def _claim_due(
        self, queue: str, limit: int, lease: timedelta, worker_id: str | None
    ) -> list[Claimed]:
        return await self._write(_claims.claim, queue, limit, lease // _US, worker_id)

    async def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        return at_us(await self._write(_writes.extend_lease, task_id, token, lease // _US))

    # --- resolution ------------------------------------------------------------------------

    async def _reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        queue = await self._write(
            _writes.resolve, SQL.reschedule, task_id, token, attempt, to_us(next_at)
        )
        self._bell.ring([queue])

    async def _complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._write(_writes.resolve, SQL.complete, task_id, token, attempt)

    async def _discard_completed(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._write(_writes.resolve, SQL.discard_completed, task_id, token, attempt)

    async def _complete_many(
        self, completions: list[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        return await self._write(_writes.complete_many, completions)

    async def _dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._write(_writes.resolve, SQL.dead_letter, task_id, token, attempt)

    # --- DLQ -------------------------------------------------------------------------------

    async def _dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return await self._read(_pages.dlq_page, queue, dlq_filter, page)

    async def _dlq_groups(self, queue: str) -> list[DLQGroup]:
        return await self._read(_reads.dlq_groups, queue)

    async def _redrive(self, queue: str, selector: Selector) -> int:
        count = await self._write(_writes.redrive, queue, selector)
        if count:
            self._bell.ring([queue])
        return count

    async def _purge(self, queue: str, selector: Selector) -> int:
        return await self._write(_writes.purge, queue, selector)

    # --- every task ------------------------------------------------------------------------

    async def _get(self, task_id: str) -> Envelope:
        return await self._read(_reads.get, task_id)

    async def _list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return await self._read(_pages.task_page, queue, task_filter, page)

    async def _cancel(self, queue: str, task_ids: list[str]) -> int:
        return await self._write(_writes.cancel, queue, task_ids)

    async def _list_queues(self) -> list[Stats]:
        return await self._snapshot(_reads.counts, None)

    # --- audit trail -----------------------------------------------------------------------

    async def _append_audit(self, entry: AuditEntry) -> AuditEntry:
        try:
            _encode(entry.selector)
        except (TypeError, msgspec.EncodeError) as exc:
            raise ValidationError(f"is not JSON-serializable: {exc}", "entry.selector") from None
        return await self._write(_writes.append_audit, entry)

    async def _list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        return await self._read(_pages.audit_page, audit_filter, page)

    # --- flow control ----------------------------------------------------------------------

    async def _list_controls(self, queue: str | None) -> list[Control]:
        return await self._snapshot(_controls.list_controls, queue)

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        stored = await self._write(_controls.put_control, control, expected_version)
        self._bell.ring([control.queue])  # it may let held-back tasks through
        return stored

    async def _delete_control(self, queue: str, key: str, expected_version: int) -> bool:
        deleted = await self._write(_controls.delete_control, queue, key, expected_version)
        if deleted:
            self._bell.ring([queue])
        return deleted

    async def _retry_now(self, queue: str, task_ids: list[str]) -> int:
        moved = await self._write(_controls.retry_now, queue, task_ids)
        if moved:
            self._bell.ring([queue])
        return moved

    # --- the fleet and counts ----------------------------------------------------------------

    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        return await self._write(_fleet.heartbeat, info)

    async def _list_workers(self) -> list[WorkerInfo]:
        return await self._read(_fleet.list_workers)

    async def _remove_worker(self, worker_id: str) -> bool:
        return await self._write(_fleet.remove_worker, worker_id)

    async def _purge_workers(self, seen_before: datetime) -> int:
        return await self._write(_fleet.purge_workers, seen_before)

    async def _add_counts(self, counts: list[Counts]) -> None:
        await self._write(_fleet.add_counts, counts)

    async def _read_counts(self, queue: str | None, since: datetime) -> list[Counts]:
        return await self._read(_fleet.read_counts, queue, since)

    async def _purge_counts(self, before: datetime) -> int:
        return await self._write(_fleet.purge_counts, before)

    # --- operations ------------------------------------------------------------------------

    async def _now(self) -> datetime:
        return await self._read(_reads.now)

    async def _stats(self, queue: str) -> Stats:
        return (await self._snapshot(_reads.counts, queue))[0]

    async def _purge_succeeded(self, queue: str, older_than: datetime) -> int:
        """Deletes in chunks of a few thousand tasks, one transaction each, so a large purge
        never holds the write lock for long."""
        before = to_us(older_than) or 0
        total = 0
        while True:
            count = await self._write(_writes.purge_finished, queue, before, _PURGE_CHUNK)
            total += count
            if count < _PURGE_CHUNK:
                return total

    async def _admit(self, task: Envelope, dedup: Dedup, delay: timedelta | None) -> Admitted:
        delay_us = (delay or timedelta(0)) // _US
        admitted, due = await self._write(_admission.admit, task, dedup, delay_us)
        if due:
            self._bell.ring([task.queue])
        return admitted

    async def _held_payload_refs(self, refs: list[str]) -> set[str]:
        return await self._read(_retention.held_payload_refs, refs)

    async def _expire_tasks(self, queue: str, task_ids: list[str], before: datetime) -> int:
        return await self._write(_retention.expire_tasks, queue, task_ids, to_us(before) or 0)

    async def _wait_due(self, queue: str, timeout: float) -> bool:
        if not self.config.notify:
            raise Unsupported(type(self).__name__, "notify", "turned off by notify=false")
        rung = self._bell.listen(queue)
        try:
            return await _notify.wait_until_due(
                lambda: self._read(_notify.next_due, queue),
                lambda: self._read(_notify.data_version),
                rung,
                timeout,
                None if self.config.in_memory else self.config.watch_interval,
            )
        finally:
            self._bell.forget(queue, rung)
