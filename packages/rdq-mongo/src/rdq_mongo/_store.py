"""``MongoStorage``: the storage contract on MongoDB, claims by findAndModify."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pymongo import ASCENDING, AsyncMongoClient, ReturnDocument, UpdateOne
from pymongo.errors import (
    BulkWriteError,
    ConfigurationError,
    DuplicateKeyError,
    OperationFailure,
)

from rdq.errors import (
    ConfigError,
    IDConflict,
    NotFound,
    StaleClaim,
    StorageError,
    StorageUnavailable,
    ValidationError,
)
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
from rdq_mongo._documents import (
    UndecodableDocument,
    attempt_to_document,
    envelope_from_document,
    envelope_to_document,
    from_micros,
    to_micros,
)
from rdq_mongo._errors import driver_errors
from rdq_mongo._notify import seconds_until_due, supports_change_streams, wait_for_due
from rdq_mongo._pipelines import (
    NOW_US,
    claim_filter,
    claim_update,
    enqueue_upsert,
    extend_update,
    resolve_update,
)
from rdq_mongo._url import MongoURL, parse_url

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection
    from pymongo.asynchronous.database import AsyncDatabase

__all__ = ["MongoStorage"]

log = logging.getLogger("rdq_mongo")

Document = dict[str, Any]

_DEFAULT_TIMEOUTS_MS = {
    "serverSelectionTimeoutMS": 5000,
    "connectTimeoutMS": 5000,
}
_NO_ATTEMPTS = {"attempts": 0}
_COMPLETED: Document = {"status": Status.SUCCEEDED.value, "completed_at": NOW_US, "due": None}
# The server cannot or may not open change streams: not a replica set (40573), the stage is
# unknown (40324), unauthorized (13).
_NO_CHANGE_STREAMS = frozenset({13, 40324, 40573})


def _micros(delta: timedelta) -> int:
    return delta // timedelta(microseconds=1)


class MongoStorage(StorageBase):
    """Tasks in one collection (``<prefix>tasks``) of one database.

    Build it with :meth:`from_url`; ``options`` are passed to ``pymongo.AsyncMongoClient``
    (the URL's own options win over rdq's defaults of 5 s server-selection and connect
    timeouts, so an unreachable server is reported quickly)."""

    def __init__(self, url: MongoURL, **options: Any) -> None:
        self._url = url
        self._options = options
        self._client: AsyncMongoClient[Document] | None = None
        self._tasks_collection: AsyncCollection[Document] | None = None
        self._change_streams = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MongoStorage:
        """A store for ``url`` (``ConfigError`` if malformed), not connected yet."""
        return cls(parse_url(url), **options)

    def __repr__(self) -> str:
        return (
            f"MongoStorage(where={self._url.where!r}, database={self._url.database!r}, "
            f"collection={self._url.tasks_collection!r})"
        )

    def capabilities(self) -> Capabilities:
        """``notify`` is True once connected to a replica-set member or mongos (where change
        streams work) unless the URL says ``rdq_notify=off``; False before ``connect``."""
        return Capabilities(
            notify=self._change_streams,
            filter_pushdown=True,
            batch_enqueue=True,
            batch_complete=True,
        )

    # --- lifecycle -------------------------------------------------------------------------

    async def connect(self) -> None:
        if self._client is not None:
            return
        options: dict[str, Any] = {**self._options, "tz_aware": True}
        lowered = {key.lower() for key in self._url.driver_url.partition("?")[2].split("&")}
        for name, value in _DEFAULT_TIMEOUTS_MS.items():
            if not any(part.startswith(name.lower() + "=") for part in lowered):
                options.setdefault(name, value)
        with driver_errors(self._url.where):
            try:
                client: AsyncMongoClient[Document] = AsyncMongoClient(
                    self._url.driver_url, **options
                )
            except ConfigurationError as exc:
                if "DNS" in str(exc):
                    raise StorageUnavailable(f"cannot resolve {self._url.where}: {exc}") from exc
                raise ConfigError(str(exc), key="storage") from exc
            tasks = client[self._url.database][self._url.tasks_collection]
            try:
                hello = await client.admin.command("hello")
                # hello needs no login: a read proves the credentials and the permissions.
                await tasks.find_one({"_id": ""}, projection={"_id": 1})
            except BaseException:
                await client.close()
                raise
        self._client = client
        self._change_streams = self._url.notify and supports_change_streams(hello)
        self._tasks_collection = tasks

    async def aclose(self) -> None:
        client, self._client = self._client, None
        self._tasks_collection = None
        if client is not None:
            with driver_errors(self._url.where):
                await client.close()

    @property
    def _tasks(self) -> AsyncCollection[Document]:
        if self._tasks_collection is None:
            raise StorageError("the MongoDB store is not connected (use `async with` or connect())")
        return self._tasks_collection

    @property
    def _database(self) -> AsyncDatabase[Document]:
        return self._tasks.database

    async def migrate(self) -> None:
        """Create the indexes (idempotent; concurrent runs are harmless)."""
        with driver_errors(self._url.where):
            await self._tasks.create_index(
                [("queue", ASCENDING), ("status", ASCENDING), ("due", ASCENDING)],
                name="rdq_claim",
            )
            await self._tasks.create_index(
                [
                    ("queue", ASCENDING),
                    ("status", ASCENDING),
                    ("dead_lettered_at", ASCENDING),
                    ("_id", ASCENDING),
                ],
                name="rdq_dlq",
            )
            await self._tasks.create_index(
                [("queue", ASCENDING), ("status", ASCENDING), ("completed_at", ASCENDING)],
                name="rdq_succeeded",
            )

    # --- admission -------------------------------------------------------------------------

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        document, due_us, delay_us = self._admission(task, delay)
        with driver_errors(self._url.where):
            try:
                before = await self._upsert(document, due_us, delay_us)
            except DuplicateKeyError:
                # Two upserts of one new id raced; the loser now sees the winner's task.
                before = await self._upsert(document, due_us, delay_us)
        if before is None:
            return True
        if before.get("queue") != task.queue:
            raise IDConflict(task.id, str(before.get("queue")))
        return False

    async def _upsert(self, document: Document, due_us: int | None, delay_us: int) -> Any:
        """Insert ``document`` unless its id exists; return the existing task's queue
        document, or ``None`` when this call inserted it."""
        return await self._tasks.find_one_and_update(
            {"_id": document["_id"]},
            enqueue_upsert(document, due_us, delay_us),
            upsert=True,
            projection={"queue": 1},
            return_document=ReturnDocument.BEFORE,
        )

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        """One round trip to find ids that already exist, one unordered bulk of upserts."""
        admissions = [self._admission(task, delay) for task in tasks]
        if not admissions:
            return []
        first_queue: dict[str, str] = {}
        for task in tasks:
            queue = first_queue.setdefault(task.id, task.queue)
            if queue != task.queue:
                raise IDConflict(task.id, queue)
        with driver_errors(self._url.where):
            existing = {
                doc["_id"]: doc.get("queue")
                async for doc in self._tasks.find(
                    {"_id": {"$in": list(first_queue)}}, projection={"queue": 1}
                )
            }
            for task_id, queue in first_queue.items():
                if task_id in existing and existing[task_id] != queue:
                    raise IDConflict(task_id, str(existing[task_id]))
            operations: list[UpdateOne] = []
            positions: list[int] = []
            seen: set[str] = set()
            for index, (task, (document, due_us, delay_us)) in enumerate(
                zip(tasks, admissions, strict=True)
            ):
                if task.id in existing or task.id in seen:
                    continue
                seen.add(task.id)
                positions.append(index)
                operations.append(
                    UpdateOne(
                        {"_id": task.id}, enqueue_upsert(document, due_us, delay_us), upsert=True
                    )
                )
            stored = [False] * len(tasks)
            if not operations:
                return stored
            try:
                result = await self._tasks.bulk_write(operations, ordered=False)
                upserted = result.upserted_ids or {}
            except BulkWriteError as exc:
                # A concurrent producer inserted some ids first (duplicate key on upsert).
                upserted = {u["index"]: u["_id"] for u in exc.details.get("upserted", [])}
                failed = [e for e in exc.details.get("writeErrors", []) if e.get("code") != 11000]
                if failed:
                    raise StorageError(f"batch enqueue failed: {failed[0].get('errmsg')}") from exc
            for op_index in upserted:
                stored[positions[op_index]] = True
            await self._check_raced(tasks, positions, upserted)
            return stored

    async def _check_raced(
        self, tasks: Sequence[Envelope], positions: list[int], upserted: dict[int, Any]
    ) -> None:
        """Ids another producer stored between our check and our upsert: same queue is fine
        (already there), another queue is an IDConflict (ours that were stored are undone,
        so the batch stays all-or-nothing)."""
        raced = [tasks[p] for i, p in enumerate(positions) if i not in upserted]
        if not raced:
            return
        found = {
            doc["_id"]: doc.get("queue")
            async for doc in self._tasks.find(
                {"_id": {"$in": [t.id for t in raced]}}, projection={"queue": 1}
            )
        }
        for task in raced:
            queue = found.get(task.id)
            if queue is not None and queue != task.queue:
                ours = [tasks[positions[i]].id for i in upserted]
                await self._tasks.delete_many({"_id": {"$in": ours}, "status": "PENDING"})
                raise IDConflict(task.id, str(queue))

    def _admission(
        self, task: Envelope, delay: timedelta | None
    ) -> tuple[Document, int | None, int]:
        limits.check_task(task)
        if delay is not None and (not isinstance(delay, timedelta) or delay < timedelta(0)):
            raise ValidationError("must be a non-negative timedelta", field="delay")
        document = envelope_to_document(task)
        return document, to_micros(task.next_attempt_at), _micros(delay or timedelta(0))

    # --- claiming --------------------------------------------------------------------------

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        limits.check_queue(queue)
        limits.check_worker_id(worker_id)
        limits.check_limit(limit)
        limits.check_lease(lease)
        lease_us = _micros(lease)
        claimed: list[Claimed] = []
        with driver_errors(self._url.where):
            while len(claimed) < limit:
                token = secrets.token_hex(16)
                doc = await self._tasks.find_one_and_update(
                    claim_filter(queue),
                    claim_update(token, lease_us),
                    sort=[("due", ASCENDING)],
                    return_document=ReturnDocument.AFTER,
                )
                if doc is None:
                    break
                try:
                    claimed.append(Claimed(envelope_from_document(doc), token))
                except UndecodableDocument as exc:
                    await self._quarantine(exc, token)
        return claimed

    async def _quarantine(self, exc: UndecodableDocument, token: str) -> None:
        """Move a claimed document that cannot be decoded to the DLQ (by its token), so it
        never blocks the queue, and report it with its id."""
        log.error(
            "rdq_mongo: dead-lettering task %r, its stored document cannot be decoded: %s",
            exc.task_id,
            exc.reason,
        )
        await self._tasks.update_one(
            {"_id": exc.task_id, "token": token},
            [
                {
                    "$set": {
                        "status": Status.DEAD.value,
                        "dead_lettered_at": NOW_US,
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
        limits.check_task_id(task_id)
        limits.check_token(token)
        limits.check_lease(lease)
        with driver_errors(self._url.where):
            doc = await self._tasks.find_one_and_update(
                self._fence(task_id, token),
                extend_update(_micros(lease)),
                projection={"lease_expires_at": 1},
                return_document=ReturnDocument.AFTER,
            )
            if doc is None:
                raise await self._why_not(task_id)
        expires = from_micros(doc["lease_expires_at"])
        assert expires is not None
        return expires

    # --- resolution ------------------------------------------------------------------------

    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        limits.check_aware(next_at, "next_at")
        at = to_micros(next_at)
        await self._resolve(
            task_id,
            token,
            attempt,
            {
                "status": Status.PENDING.value,
                "next_attempt_at": {"$literal": at},
                "due": {"$literal": at},
            },
        )

    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._resolve(task_id, token, attempt, _COMPLETED)

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        """One ordered bulk of the fenced updates ``complete`` makes. When some matched
        nothing, one read tells which: a task whose ``resolved_token`` is the completion's
        token was completed by it (tokens are never reused); otherwise the claim was stale,
        or the task is gone (``NotFound``)."""
        for item in completions:
            if not isinstance(item, Completion):
                raise ValidationError("must be rdq.spi.Completion items", field="completions")
            _check_resolution(item.task_id, item.token, item.attempt)
        if not completions:
            return []
        operations = [
            UpdateOne(
                self._fence(item.task_id, item.token),
                resolve_update(attempt_to_document(item.attempt), item.token, _COMPLETED),
            )
            for item in completions
        ]
        with driver_errors(self._url.where):
            result = await self._tasks.bulk_write(operations, ordered=True)
            if result.matched_count == len(operations):
                return [None] * len(operations)
            found = {
                doc["_id"]: doc.get("resolved_token")
                async for doc in self._tasks.find(
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

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._resolve(
            task_id,
            token,
            attempt,
            {
                "status": Status.DEAD.value,
                "dead_lettered_at": NOW_US,
                "dl_error_type": {"$literal": getattr(attempt, "error_type", None)},
                "due": None,
            },
        )

    async def _resolve(self, task_id: str, token: str, attempt: Attempt, changes: Document) -> None:
        _check_resolution(task_id, token, attempt)
        with driver_errors(self._url.where):
            result = await self._tasks.update_one(
                self._fence(task_id, token),
                resolve_update(attempt_to_document(attempt), token, changes),
            )
            if result.matched_count == 0:
                raise await self._why_not(task_id)

    @staticmethod
    def _fence(task_id: str, token: str) -> Document:
        return {"_id": task_id, "token": token, "status": Status.IN_FLIGHT.value}

    async def _why_not(self, task_id: str) -> StorageError:
        """The error for a fenced update that matched nothing."""
        exists = await self._tasks.find_one({"_id": task_id}, projection={"_id": 1})
        return NotFound(task_id) if exists is None else StaleClaim(task_id)

    # --- DLQ -------------------------------------------------------------------------------

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        limits.check_queue(queue)
        limits.check_page(page)
        if dlq_filter is not None:
            limits.check_filter(dlq_filter)
        query = self._dead(queue, dlq_filter)
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
        with driver_errors(self._url.where):
            found = self._tasks.find(
                query,
                projection=None if page.include_attempts else _NO_ATTEMPTS,
                sort=[("dead_lettered_at", ASCENDING), ("_id", ASCENDING)],
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

    @staticmethod
    def _dead(queue: str, dlq_filter: DLQFilter | None) -> Document:
        query: Document = {"queue": queue, "status": Status.DEAD.value}
        if dlq_filter is None:
            return query
        if dlq_filter.handler_ref is not None:
            query["handler_ref"] = dlq_filter.handler_ref
        if dlq_filter.error_type is not None:
            query["dl_error_type"] = dlq_filter.error_type
        window: Document = {}
        if dlq_filter.dead_lettered_after is not None:
            window["$gte"] = to_micros(dlq_filter.dead_lettered_after)
        if dlq_filter.dead_lettered_before is not None:
            window["$lt"] = to_micros(dlq_filter.dead_lettered_before)
        if window:
            query["dead_lettered_at"] = window
        return query

    def _selected(self, queue: str, selector: Selector) -> Document:
        if selector.ids is not None:
            return {
                "queue": queue,
                "status": Status.DEAD.value,
                "_id": {"$in": list(dict.fromkeys(selector.ids))},
            }
        return self._dead(queue, selector.filter)

    async def get(self, task_id: str) -> Envelope:
        limits.check_task_id(task_id)
        with driver_errors(self._url.where):
            doc = await self._tasks.find_one({"_id": task_id})
        if doc is None:
            raise NotFound(task_id)
        try:
            return envelope_from_document(doc)
        except UndecodableDocument as exc:
            raise StorageError(str(exc)) from None

    async def redrive(self, queue: str, selector: Selector) -> int:
        limits.check_queue(queue)
        limits.check_selector(selector)
        with driver_errors(self._url.where):
            result = await self._tasks.update_many(
                self._selected(queue, selector),
                [
                    {
                        "$set": {
                            "status": Status.PENDING.value,
                            "attempt_count": 0,
                            "redrive_count": {"$add": ["$redrive_count", 1]},
                            "next_attempt_at": NOW_US,
                            "due": NOW_US,
                            "dead_lettered_at": None,
                            "dl_error_type": None,
                        }
                    }
                ],
            )
        return result.modified_count

    async def purge(self, queue: str, selector: Selector) -> int:
        limits.check_queue(queue)
        limits.check_selector(selector)
        with driver_errors(self._url.where):
            result = await self._tasks.delete_many(self._selected(queue, selector))
        return result.deleted_count

    # --- operations ------------------------------------------------------------------------

    async def stats(self, queue: str) -> Stats:
        limits.check_queue(queue)
        pending_due = {
            "$and": [
                {"$eq": ["$status", Status.PENDING.value]},
                {"$lte": ["$due", NOW_US]},
            ]
        }
        pipeline: list[Document] = [
            {"$match": {"queue": queue}},
            {
                "$group": {
                    "_id": "$status",
                    "count": {"$sum": 1},
                    "oldest_age": {
                        "$max": {"$cond": [pending_due, {"$subtract": [NOW_US, "$due"]}, None]}
                    },
                }
            },
        ]
        counts = dict.fromkeys(Status, 0)
        oldest_age_us: int | None = None
        with driver_errors(self._url.where):
            as_of = await self._server_now()
            async for row in await self._tasks.aggregate(pipeline):
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

    async def _server_now(self) -> datetime:
        """The server's clock, from its ``hello`` reply (millisecond precision)."""
        reply = await self._database.command("hello")
        local: datetime = reply["localTime"]
        return local if local.tzinfo is not None else local.replace(tzinfo=UTC)

    async def wait_due(self, queue: str, timeout: float) -> bool:
        """Block until a task of ``queue`` may be due (True) or ``timeout`` seconds pass
        (False). With change streams, an enqueue, reschedule or redrive wakes the waiter at
        once; without them (standalone server, ``rdq_notify=off``) it sleeps until the next
        due time the server reports, or the timeout."""
        limits.check_queue(queue)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise ValidationError("must be a non-negative number of seconds", field="timeout")
        with driver_errors(self._url.where):
            if self._change_streams:
                try:
                    return await wait_for_due(self._tasks, queue, float(timeout))
                except OperationFailure as exc:
                    if exc.code not in _NO_CHANGE_STREAMS:
                        raise
                    log.warning(
                        "rdq_mongo: change streams refused by %s (%s); polling instead",
                        self._url.where,
                        exc.code,
                    )
                    self._change_streams = False
            wait = await seconds_until_due(self._tasks, queue)
        if wait is not None and wait <= 0:
            return True
        if wait is not None and wait <= timeout:
            await asyncio.sleep(wait)
            return True
        await asyncio.sleep(timeout)
        return False

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        limits.check_queue(queue)
        limits.check_aware(older_than, "older_than")
        with driver_errors(self._url.where):
            result = await self._tasks.delete_many(
                {
                    "queue": queue,
                    "status": Status.SUCCEEDED.value,
                    "completed_at": {"$lt": to_micros(older_than)},
                }
            )
        return result.deleted_count


def _check_resolution(task_id: str, token: str, attempt: Attempt) -> None:
    limits.check_task_id(task_id)
    limits.check_token(token)
    if not isinstance(attempt, Attempt):
        raise ValidationError("must be an rdq.spi.Attempt", field="attempt")
