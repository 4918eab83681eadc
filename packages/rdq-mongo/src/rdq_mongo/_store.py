"""``MongoStorage``: the storage contract on MongoDB, claims by findAndModify.

One method per contract operation; the queries live in ``_queries``, the document layout in
``_codec``, admission in ``_admission``, the client in ``_connection``.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import ReturnDocument, UpdateOne

from rdq.errors import NotConnected, NotFound, StaleClaim, StorageError, ValidationError
from rdq.spi import (
    Attempt,
    Capabilities,
    Claimed,
    Completion,
    DLQCursor,
    DLQFilter,
    Envelope,
    Page,
    Selector,
    Stats,
    Status,
    StorageBase,
    limits,
)
from rdq_mongo import _queries as q
from rdq_mongo._admission import admit_batch, admit_one
from rdq_mongo._codec import (
    UndecodableDocument,
    attempt_to_document,
    envelope_from_document,
    from_micros,
    to_micros,
)
from rdq_mongo._connection import Connection, Document, close_connection, open_connection
from rdq_mongo._errors import translate_errors
from rdq_mongo._migrate import migrate
from rdq_mongo._notify import wait_due
from rdq_mongo._url import MongoConfig, parse_url

__all__ = ["MongoStorage"]

log = logging.getLogger("rdq_mongo")

_NO_ATTEMPTS = {"attempts": 0}


def _micros(delta: timedelta) -> int:
    return delta // timedelta(microseconds=1)


class MongoStorage(StorageBase):
    """Tasks in one collection (``<prefix>tasks``) of one database.

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

    def capabilities(self) -> Capabilities:
        """``notify`` is True while connected to a replica-set member or mongos (where change
        streams work) unless the URL says ``rdq_notify=off``; False when not connected."""
        return Capabilities(
            notify=self._conn is not None and self._conn.change_streams,
            filter_pushdown=True,
            batch_enqueue=True,
            batch_complete=True,
        )

    # --- lifecycle -------------------------------------------------------------------------

    async def _open(self) -> None:
        self._conn = await open_connection(self._config)

    async def _close(self) -> None:
        connection, self._conn = self._conn, None
        if connection is not None:
            await close_connection(connection)

    def _connection(self) -> Connection:
        """The open connection; ``NotConnected`` before ``connect`` and after ``aclose``."""
        self._check_open()
        if self._conn is None:
            raise NotConnected(type(self).__name__, closed=self._closed)
        return self._conn

    @contextmanager
    def _errors(self) -> Iterator[None]:
        with translate_errors(self._config.where):
            yield

    async def migrate(self) -> None:
        """Create the indexes (idempotent; concurrent runs are harmless)."""
        connection = self._connection()
        with self._errors():
            await migrate(connection)

    # --- admission -------------------------------------------------------------------------

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        connection = self._connection()
        with self._errors():
            return await admit_one(connection, task, delay)

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        """All-or-nothing on a server with transactions; see ``_admission`` for the weaker
        guarantee on a standalone server."""
        connection = self._connection()
        with self._errors():
            return await admit_batch(connection, tasks, delay)

    # --- claiming --------------------------------------------------------------------------

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        connection = self._connection()
        limits.check_queue(queue)
        limits.check_worker_id(worker_id)
        limits.check_limit(limit)
        limits.check_lease(lease)
        lease_us = _micros(lease)
        claimed: list[Claimed] = []
        with self._errors():
            while len(claimed) < limit:
                token = secrets.token_hex(16)
                doc = await connection.tasks.find_one_and_update(
                    q.claim_filter(queue),
                    q.claim_update(token, lease_us),
                    sort=q.CLAIM_SORT,
                    return_document=ReturnDocument.AFTER,
                )
                if doc is None:
                    break
                try:
                    claimed.append(Claimed(envelope_from_document(doc), token))
                except UndecodableDocument as exc:
                    await self._quarantine(connection, exc, token)
        return claimed

    async def _quarantine(
        self, connection: Connection, exc: UndecodableDocument, token: str
    ) -> None:
        """Move a claimed document that cannot be decoded to the DLQ (by its token), so it
        never blocks the queue, and report it with its id."""
        log.error(
            "rdq_mongo: dead-lettering task %r, its stored document cannot be decoded: %s",
            exc.task_id,
            exc.reason,
        )
        await connection.tasks.update_one(
            {"_id": exc.task_id, "token": token},
            [
                {
                    "$set": {
                        "status": Status.DEAD.value,
                        "dead_lettered_at": q.NOW_US,
                        "dl_error_type": "UndecodableTask",
                        "decode_error": {"$literal": exc.reason},
                        "due": None,
                        "token": None,
                        "lease_expires_at": None,
                    }
                }
            ],
        )

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
        changes = q.dead_letter_changes(getattr(attempt, "error_type", None))
        await self._resolve(task_id, token, attempt, changes)

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
        query = q.dead_filter(queue, dlq_filter)
        if page.cursor is not None:
            cursor = DLQCursor.decode(page.cursor, queue, dlq_filter)
            at = to_micros(cursor.dead_lettered_at)
            query = {
                "$and": [
                    query,
                    {
                        "$or": [
                            {"dead_lettered_at": {"$gt": at}},
                            {"dead_lettered_at": at, "_id": {"$gt": cursor.id}},
                        ]
                    },
                ]
            }
        out: list[Envelope] = []
        last: Document | None = None
        scanned = 0
        more = False
        with self._errors():
            found = connection.tasks.find(
                query,
                projection=None if page.include_attempts else _NO_ATTEMPTS,
                sort=q.DLQ_SORT,
                limit=page.limit + 1,
            )
            async for doc in found:
                if scanned == page.limit:
                    more = True
                    break
                scanned += 1
                last = doc
                try:
                    out.append(envelope_from_document(doc, with_attempts=page.include_attempts))
                except UndecodableDocument as exc:
                    log.error("rdq_mongo: skipping DLQ task %r in a listing: %s", exc.task_id, exc)
        if not more or last is None:
            return out, None
        last_at = from_micros(last.get("dead_lettered_at"))
        if last_at is None:
            raise StorageError(f"DLQ task {last.get('_id')!r} has no dead_lettered_at")
        return out, DLQCursor.after(queue, dlq_filter, last_at, str(last["_id"])).encode()

    async def get(self, task_id: str) -> Envelope:
        connection = self._connection()
        limits.check_task_id(task_id)
        with self._errors():
            doc = await connection.tasks.find_one({"_id": task_id})
        if doc is None:
            raise NotFound(task_id)
        try:
            return envelope_from_document(doc)
        except UndecodableDocument as exc:
            raise StorageError(str(exc)) from None

    async def redrive(self, queue: str, selector: Selector) -> int:
        connection = self._connection()
        limits.check_queue(queue)
        limits.check_selector(selector)
        with self._errors():
            result = await connection.tasks.update_many(
                q.selected_filter(queue, selector), q.redrive_update()
            )
        return result.modified_count

    async def purge(self, queue: str, selector: Selector) -> int:
        connection = self._connection()
        limits.check_queue(queue)
        limits.check_selector(selector)
        with self._errors():
            result = await connection.tasks.delete_many(q.selected_filter(queue, selector))
        return result.deleted_count

    # --- operations ------------------------------------------------------------------------

    async def stats(self, queue: str) -> Stats:
        connection = self._connection()
        limits.check_queue(queue)
        counts = dict.fromkeys(Status, 0)
        oldest_age_us: int | None = None
        with self._errors():
            as_of = await _server_now(connection)
            async for row in await connection.tasks.aggregate(q.stats_pipeline(queue)):
                if row["_id"] in counts:
                    counts[Status(row["_id"])] = row["count"]
                if row.get("oldest_age") is not None:
                    oldest_age_us = max(0, row["oldest_age"])
        return Stats(
            queue=queue,
            pending=counts[Status.PENDING],
            in_flight=counts[Status.IN_FLIGHT],
            dlq_depth=counts[Status.DEAD],
            succeeded=counts[Status.SUCCEEDED],
            oldest_pending_age=None if oldest_age_us is None else oldest_age_us / 1_000_000,
            as_of=as_of,
        )

    async def wait_due(self, queue: str, timeout: float) -> bool:
        """Block until a task of ``queue`` may be due (True) or ``timeout`` seconds pass
        (False); see ``_notify`` for how."""
        connection = self._connection()
        limits.check_queue(queue)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise ValidationError("must be a non-negative number of seconds", field="timeout")
        with self._errors():
            return await wait_due(connection, queue, float(timeout))

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        connection = self._connection()
        limits.check_queue(queue)
        limits.check_aware(older_than, "older_than")
        with self._errors():
            result = await connection.tasks.delete_many(
                {
                    "queue": queue,
                    "status": Status.SUCCEEDED.value,
                    "completed_at": {"$lt": to_micros(older_than)},
                }
            )
        return result.deleted_count


async def _server_now(connection: Connection) -> datetime:
    """The server's clock, from its ``hello`` reply (millisecond precision)."""
    reply = await connection.database.command("hello")
    local: datetime = reply["localTime"]
    return local if local.tzinfo is not None else local.replace(tzinfo=UTC)


def _check_resolution(task_id: str, token: str, attempt: Attempt) -> None:
    limits.check_task_id(task_id)
    limits.check_token(token)
    limits.check_attempt(attempt)
