"""``MongoStorage``: the storage contract on MongoDB, claims by findAndModify.

One method per contract operation; the queries live in ``_queries``, the document layout in
``_codec``, admission in ``_admission``, reads over many documents in ``_reads``, the client
in ``_connection``.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pymongo
from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import PyMongoError

from rdq.errors import NotConnected, NotFound, StaleClaim, StorageError, ValidationError
from rdq.spi import (
    Attempt,
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
    task_scope,
)
from rdq_mongo import _queries as q
from rdq_mongo._admission import Admission, admit_batch, admit_one
from rdq_mongo._codec import (
    NO_ATTEMPTS,
    attempt_to_document,
    audit_from_document,
    audit_to_document,
    envelope_from_document,
    from_micros,
    to_micros,
)
from rdq_mongo._connection import Connection, Document, close_connection, open_connection
from rdq_mongo._errors import translate_errors
from rdq_mongo._migrate import migrate
from rdq_mongo._notify import wait_due
from rdq_mongo._reads import dlq_groups, keyset_page, queue_stats, server_now
from rdq_mongo._url import MongoConfig, parse_url

__all__ = ["MongoStorage"]


def _micros(delta: timedelta) -> int:
    return delta // timedelta(microseconds=1)


class MongoStorage(StorageBase):
    """Tasks in one collection (``<prefix>tasks``) of one database, the audit trail in
    another (``<prefix>audit``).

    Build it with :meth:`from_url`; ``options`` are passed to ``pymongo.AsyncMongoClient``
    (the URL's own options win over rdq's defaults of 5 s server-selection and connect
    timeouts, so an unreachable server is reported quickly)."""

    def __init__(self, config: MongoConfig) -> None:
        self._config = config
        self._conn: Connection | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MongoStorage:
        """A store for ``url`` (``ConfigError`` if malformed), not connected yet."""
        return cls(parse_url(url, **options))

    @property
    def config(self) -> MongoConfig:
        return self._config

    def __repr__(self) -> str:
        return (
            f"MongoStorage(where={self._config.where!r}, database={self._config.database!r}, "
            f"collection={self._config.tasks_collection!r})"
        )

    def reopen(self) -> MongoStorage:
        """A second store on the same data, with connections of its own."""
        return MongoStorage(self._config)

    def capabilities(self) -> Capabilities:
        """The same on every call: ``notify`` unless the URL says ``rdq_notify=off``
        (``wait_due`` uses change streams where the server has them, and polls the next due
        time every second where it does not)."""
        return Capabilities(
            reopen=True,
            notify=self._config.notify,
            filter_pushdown=True,
            batch_enqueue=True,
            batch_complete=True,
            group_pushdown=True,
        )

    # --- lifecycle -------------------------------------------------------------------------

    async def _open(self) -> None:
        self._conn = await open_connection(self._config)

    async def _close(self) -> None:
        connection, self._conn = self._conn, None
        if connection is not None:
            await close_connection(connection, self._config.timeout)

    def _connection(self) -> Connection:
        """The open connection; ``NotConnected`` before ``connect`` and after ``aclose``."""
        self._check_open()
        if self._conn is None:
            raise NotConnected(type(self).__name__, closed=self._closed)
        return self._conn

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Driver errors translated, and the operation timeout: PyMongo's own (``timeoutMS``
        for the block), which bounds server selection, each socket read and, as
        ``maxTimeMS``, the server's work; ``StorageUnavailable`` when it runs out."""
        with translate_errors(self._config.where), pymongo.timeout(self._config.timeout):
            yield

    async def migrate(self) -> None:
        """Create the indexes and upgrade documents of the previous release (idempotent;
        concurrent runs are harmless). Exempt from the operation timeout: an index build or
        an upgrade of many documents may take longer."""
        connection = self._connection()
        with translate_errors(self._config.where):
            await migrate(connection)

    # --- admission -------------------------------------------------------------------------

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        connection = self._connection()
        item = Admission.enqueued(task, delay)
        with self._errors():
            return await admit_one(connection, item)

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        """All-or-nothing on a server with transactions; see ``_admission`` for the weaker
        guarantee on a standalone server."""
        connection = self._connection()
        items = [Admission.enqueued(task, delay) for task in tasks]
        with self._errors():
            return await admit_batch(connection, items)

    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        """Stored exactly as given, with no claim token, all-or-nothing like
        ``enqueue_batch``."""
        connection = self._connection()
        items = [Admission.imported(task) for task in limits.check_imported_tasks(tasks)]
        with self._errors():
            return await admit_batch(connection, items)

    # --- claiming --------------------------------------------------------------------------

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        """One task per findAndModify, up to ``limit``, within one operation timeout. A
        failure part-way (the timeout running out on a slow server, a lost connection) ends
        the batch with the tasks claimed so far; it raises only when nothing was claimed."""
        connection = self._connection()
        limits.check_queue(queue)
        limits.check_limit(limit)
        limits.check_lease(lease)
        limits.check_worker_id(worker_id)
        lease_us = _micros(lease)
        claimed: list[Claimed] = []
        with self._errors():
            while len(claimed) < limit:
                token = secrets.token_hex(16)
                try:
                    doc = await connection.tasks.find_one_and_update(
                        q.claim_filter(queue, [c.task.id for c in claimed]),
                        q.claim_update(token, lease_us, worker_id),
                        sort=q.CLAIM_SORT,
                        return_document=ReturnDocument.AFTER,
                    )
                except PyMongoError:
                    if not claimed:
                        raise
                    # The tasks claimed so far are leased to the caller already: hand them
                    # over rather than strand them until their leases lapse (and cost each
                    # an attempt). The next call meets the error, if it lasts.
                    break
                if doc is None:
                    break
                claimed.append(Claimed(envelope_from_document(doc), token))
        return claimed

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        connection = self._connection()
        limits.check_task_id(task_id)
        limits.check_token(token)
        limits.check_lease(lease)
        with self._errors():
            doc = await connection.tasks.find_one_and_update(
                q.fence(task_id, token),
                q.extend_update(_micros(lease)),
                projection={"lease_expires_at": 1},
                return_document=ReturnDocument.AFTER,
            )
            if doc is None:
                raise await self._why_not(connection, task_id)
        expires = from_micros(doc.get("lease_expires_at"))
        if expires is None:
            raise StorageError(f"task {task_id!r} has no lease after extending it")
        return expires

    # --- resolution ------------------------------------------------------------------------

    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        self._check_open()
        limits.check_aware(next_at, "next_at")
        await self._resolve(task_id, token, attempt, q.reschedule_changes(to_micros(next_at)))

    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._resolve(task_id, token, attempt, q.COMPLETED)

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._resolve(task_id, token, attempt, q.dead_letter_changes())

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        """One ordered bulk of the fenced updates ``complete`` makes. When some matched
        nothing, one read tells which: a task whose ``resolved_token`` is the completion's
        token was completed by it (tokens are never reused); otherwise the claim was stale,
        or the task is gone (``NotFound``)."""
        connection = self._connection()
        for item in completions:
            if not isinstance(item, Completion):
                raise ValidationError("must be rdq.spi.Completion items", field="completions")
            _check_resolution(item.task_id, item.token, item.attempt)
        if not completions:
            return []
        operations = [
            UpdateOne(
                q.fence(item.task_id, item.token),
                q.resolve_update(attempt_to_document(item.attempt), item.token, q.COMPLETED),
            )
            for item in completions
        ]
        with self._errors():
            result = await connection.tasks.bulk_write(operations, ordered=True)
            if result.matched_count == len(operations):
                return [None] * len(operations)
            found = {
                doc["_id"]: doc.get("resolved_token")
                async for doc in connection.tasks.find(
                    {"_id": {"$in": [item.task_id for item in completions]}},
                    projection={"resolved_token": 1},
                )
            }
        results: list[StaleClaim | NotFound | None] = []
        credited: set[tuple[str, str]] = set()
        for item in completions:
            key = (item.task_id, item.token)
            if item.task_id not in found:
                results.append(NotFound(item.task_id))
            elif found[item.task_id] == item.token and key not in credited:
                credited.add(key)
                results.append(None)
            else:
                results.append(StaleClaim(item.task_id))
        return results

    async def _resolve(self, task_id: str, token: str, attempt: Attempt, changes: Document) -> None:
        connection = self._connection()
        _check_resolution(task_id, token, attempt)
        with self._errors():
            result = await connection.tasks.update_one(
                q.fence(task_id, token),
                q.resolve_update(attempt_to_document(attempt), token, changes),
            )
            if result.matched_count == 0:
                raise await self._why_not(connection, task_id)

    @staticmethod
    async def _why_not(connection: Connection, task_id: str) -> StorageError:
        """The error for a fenced update that matched nothing."""
        exists = await connection.tasks.find_one({"_id": task_id}, projection={"_id": 1})
        return NotFound(task_id) if exists is None else StaleClaim(task_id)

    # --- DLQ -------------------------------------------------------------------------------

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        connection = self._connection()
        limits.check_queue(queue)
        limits.check_page(page)
        if dlq_filter is not None:
            limits.check_filter(dlq_filter)
        after = None
        if page.cursor is not None:
            cursor = DLQCursor.decode(page.cursor, queue, dlq_filter)
            after = (_key_micros(cursor.dead_lettered_at), cursor.id)
        tasks, last = await self._task_page(
            connection, q.dead_filter(queue, dlq_filter), page, after
        )
        if last is None:
            return tasks, None
        return tasks, DLQCursor.after(queue, dlq_filter, last[0], last[1]).encode()

    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        connection = self._connection()
        limits.check_queue(queue)
        with self._errors():
            return await dlq_groups(connection, queue)

    async def get(self, task_id: str) -> Envelope:
        connection = self._connection()
        limits.check_task_id(task_id)
        with self._errors():
            doc = await connection.tasks.find_one({"_id": task_id})
        if doc is None:
            raise NotFound(task_id)
        return envelope_from_document(doc)

    async def redrive(self, queue: str, selector: Selector) -> int:
        connection = self._connection()
        limits.check_queue(queue)
        limits.check_selector(selector)
        with self._errors():
            result = await connection.tasks.update_many(
                q.selected_filter(queue, selector, by_ids=(Status.DEAD,)), q.redrive_update()
            )
        return result.modified_count

    async def purge(self, queue: str, selector: Selector) -> int:
        connection = self._connection()
        limits.check_queue(queue)
        limits.check_selector(selector)
        selected = q.selected_filter(queue, selector, by_ids=(Status.DEAD, Status.CANCELLED))
        with self._errors():
            result = await connection.tasks.delete_many(selected)
        return result.deleted_count

    # --- every task ------------------------------------------------------------------------

    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        connection = self._connection()
        limits.check_queue(queue)
        limits.check_task_filter(task_filter)
        limits.check_page(page)
        scope = task_scope(queue, task_filter)
        after = None
        if page.cursor is not None:
            cursor = KeysetCursor.decode(page.cursor, scope)
            after = (_key_micros(cursor.at), cursor.id)
        query = q.task_filter(queue, task_filter)
        tasks, last = await self._task_page(connection, query, page, after)
        if last is None:
            return tasks, None
        return tasks, KeysetCursor.after(scope, last[0], last[1]).encode()

    async def _task_page(
        self,
        connection: Connection,
        query: Document,
        page: Page,
        after: tuple[int, str] | None,
    ) -> tuple[list[Envelope], tuple[datetime, str] | None]:
        """One page of tasks in ``(status time, id)`` order, and the key of its last task
        when more follow."""
        field = q.STATUS_AT
        with self._errors():
            docs, more = await keyset_page(
                connection.tasks,
                query,
                field,
                limit=page.limit,
                after=after,
                projection=None if page.include_attempts else NO_ATTEMPTS,
            )
        tasks = [envelope_from_document(doc) for doc in docs]
        if not more or not docs:
            return tasks, None
        last_at = from_micros(docs[-1].get(field))
        if last_at is None:
            raise StorageError(f"task {docs[-1].get('_id')!r} has no {field}")
        return tasks, (last_at, str(docs[-1]["_id"]))

    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        connection = self._connection()
        limits.check_queue(queue)
        ids = limits.check_ids(task_ids)
        if not ids:
            return 0
        live = [Status.PENDING.value, Status.IN_FLIGHT.value]
        with self._errors():
            result = await connection.tasks.update_many(
                {"_id": {"$in": list(dict.fromkeys(ids))}, "queue": queue, "status": {"$in": live}},
                q.cancel_update(),
            )
        return result.modified_count

    async def list_queues(self) -> list[Stats]:
        connection = self._connection()
        with self._errors():
            return await queue_stats(connection, None)

    # --- audit trail -----------------------------------------------------------------------

    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        connection = self._connection()
        limits.check_audit_entry(entry)
        entry_id = uuid.uuid4().hex
        with self._errors():
            doc = await connection.audit.find_one_and_update(
                {"_id": entry_id},
                q.audit_insert(audit_to_document(entry, entry_id)),
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
        if doc is None:
            raise StorageError(f"audit entry {entry_id} was not stored")
        return audit_from_document(doc)

    async def list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        connection = self._connection()
        if audit_filter is not None:
            limits.check_audit_filter(audit_filter)
        limits.check_page(page)
        scope = audit_scope(audit_filter)
        after = None
        if page.cursor is not None:
            cursor = KeysetCursor.decode(page.cursor, scope)
            after = (_key_micros(cursor.at), cursor.id)
        with self._errors():
            docs, more = await keyset_page(
                connection.audit,
                q.audit_filter(audit_filter),
                "time",
                limit=page.limit,
                after=after,
                descending=True,
            )
        entries = [audit_from_document(doc) for doc in docs]
        last = entries[-1] if entries else None
        if not more or last is None or last.time is None or last.id is None:
            return entries, None
        return entries, KeysetCursor.after(scope, last.time, last.id).encode()

    # --- operations ------------------------------------------------------------------------

    async def now(self) -> datetime:
        connection = self._connection()
        with self._errors():
            return await server_now(connection)

    async def stats(self, queue: str) -> Stats:
        connection = self._connection()
        limits.check_queue(queue)
        with self._errors():
            (stats,) = await queue_stats(connection, queue)
        return stats

    async def wait_due(self, queue: str, timeout: float) -> bool:
        """Block until a task of ``queue`` may be due (True) or ``timeout`` seconds pass
        (False); see ``_notify`` for how."""
        connection = self._connection()
        limits.check_queue(queue)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise ValidationError("must be a non-negative number of seconds", field="timeout")
        # The wait itself is exempt from the operation timeout; each call to the server in it
        # is bounded by it.
        with translate_errors(self._config.where):
            return await wait_due(connection, queue, float(timeout), self._config.timeout)

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        connection = self._connection()
        limits.check_queue(queue)
        limits.check_aware(older_than, "older_than")
        finished = [Status.SUCCEEDED.value, Status.CANCELLED.value]
        query = {
            "queue": queue,
            "status": {"$in": finished},
            q.STATUS_AT: {"$lt": to_micros(older_than)},
        }
        with self._errors():
            result = await connection.tasks.delete_many(query)
        return result.deleted_count


def _key_micros(at: datetime) -> int:
    micros = to_micros(at)
    if micros is None:  # a decoded cursor always carries a time
        raise StorageError("a cursor without a time")
    return micros


def _check_resolution(task_id: str, token: str, attempt: Attempt) -> None:
    limits.check_task_id(task_id)
    limits.check_token(token)
    limits.check_attempt(attempt)
