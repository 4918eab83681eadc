"""``MongoStorage``: the storage contract on MongoDB, claims by findAndModify.

The driver calls of each ``StorageBase`` operation (the base checks that the store is open
and validates the arguments first). The filters live in ``_filters``, the update pipelines
in ``_updates``, the document layout in ``_codec``, admission in ``_admission``, claims in
``_claims``, control records and ``retry_now`` in ``_controls``, the worker registry and the
counts in ``_fleet``, what leaves the store (``expire_tasks``) in ``_retention``, every
listing and count in ``_pages``, the client in ``_connection``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pymongo
from pymongo import ReturnDocument, UpdateOne

from rdq.errors import NotConnected, NotFound, StaleClaim, StorageError
from rdq.spi import (
    CONTRACT_VERSION,
    Admitted,
    Attempt,
    AuditEntry,
    AuditFilter,
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
    fence,
)
from rdq_mongo import _controls, _fleet, _pages, _retention
from rdq_mongo import _filters as f
from rdq_mongo import _updates as u
from rdq_mongo._admission import Admission, admit_batch, admit_dedup, admit_one
from rdq_mongo._claims import HOLD_MARGIN_US, Claim, extend
from rdq_mongo._codec import (
    attempt_to_document,
    audit_from_document,
    audit_to_document,
    envelope_from_document,
    from_micros,
    to_micros,
)
from rdq_mongo._connection import (
    Connection,
    Document,
    close_connection,
    open_connection,
    server_now,
)
from rdq_mongo._errors import translate_errors
from rdq_mongo._migrate import migrate
from rdq_mongo._notify import wait_due
from rdq_mongo._url import MongoConfig, parse_url

__all__ = ["MongoStorage"]


def _micros(delta: timedelta) -> int:
    return delta // timedelta(microseconds=1)


class MongoStorage(StorageBase):
    """Tasks in one collection (``<prefix>tasks``) of one database, the audit trail in
    another (``<prefix>audit``), control records, the worker registry and per-minute counts
    in three more (``<prefix>controls``, ``<prefix>workers``, ``<prefix>counts``).

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
        """The same on every call: contract version 4 with every flag but
        ``transactional_enqueue``, ``notify`` unless the URL says ``rdq_notify=off``
        (``wait_due`` uses change streams where the server has them, and polls the next due
        time every second where it does not)."""
        return Capabilities(
            contract_version=CONTRACT_VERSION,
            notify=self._config.notify,
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
            discard_succeeded=True,
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
        if self._conn is None:
            raise NotConnected(type(self).__name__, closed=self._closed)
        return self._conn

    @contextmanager
    def _errors(self) -> Iterator[Connection]:
        """The open connection, with driver errors translated, and the operation timeout:
        PyMongo's own (``timeoutMS`` for the block), which bounds server selection, each
        socket read and, as ``maxTimeMS``, the server's work; ``StorageUnavailable`` when it
        runs out."""
        connection = self._connection()
        with translate_errors(self._config.where), pymongo.timeout(self._config.timeout):
            yield connection

    async def _migrate(self) -> list[str]:
        """Create the indexes and upgrade documents of the previous release (idempotent;
        concurrent runs are harmless). Exempt from the operation timeout: an index build or
        an upgrade of many documents may take longer."""
        connection = self._connection()
        with translate_errors(self._config.where):
            return await migrate(connection)

    # --- admission -------------------------------------------------------------------------

    async def _enqueue(self, task: Envelope, delay: timedelta | None) -> bool:
        with self._errors() as connection:
            return await admit_one(connection, Admission.enqueued(task, delay))

    async def _enqueue_batch(self, tasks: list[Envelope], delay: timedelta | None) -> list[bool]:
        """All-or-nothing on a server with transactions; see ``_admission`` for the weaker
        guarantee on a standalone server."""
        with self._errors() as connection:
            return await admit_batch(connection, tasks, lambda t: Admission.enqueued(t, delay))

    async def _import_tasks(self, tasks: list[Envelope]) -> list[bool]:
        """Stored exactly as given, with no claim token, all-or-nothing like
        ``enqueue_batch``."""
        with self._errors() as connection:
            return await admit_batch(connection, tasks, Admission.imported)

    # --- claiming --------------------------------------------------------------------------

    async def _claim_due(
        self, queue: str, limit: int, lease: timedelta, worker_id: str | None
    ) -> list[Claimed]:
        """See ``_claims``: with no control record restricting the queue, one lookup of its
        control document, then one task per findAndModify, up to ``limit``, within one
        operation timeout. A failure part-way ends the batch with the tasks claimed so far;
        it raises only when nothing was claimed."""
        hold_us = int(self._config.timeout * 1_000_000) + HOLD_MARGIN_US
        claim: Claim | None = None
        try:
            with self._errors() as connection:
                claim = Claim(connection, queue, limit, _micros(lease), worker_id, hold_us)
                return await claim.run()
        finally:
            if claim is not None and claim.owed is not None:
                # What a claim took and did not settle (its timeout ran out, the connection
                # failed) goes back in an operation timeout of its own, if the server answers.
                with contextlib.suppress(StorageError), self._errors():
                    await claim.settle()

    async def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        hold_us = int(self._config.timeout * 1_000_000) + HOLD_MARGIN_US
        with self._errors() as connection:
            doc = await extend(connection, task_id, token, _micros(lease), hold_us)
            applied = doc is not None
            fence(
                task_id, found=applied or await self._exists(connection, task_id), applied=applied
            )
        expires = from_micros(doc.get("lease_expires_at")) if doc is not None else None
        if expires is None:
            raise StorageError(f"task {task_id!r} has no lease after extending it")
        return expires

    # --- resolution ------------------------------------------------------------------------

    async def _reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        await self._resolve(task_id, token, attempt, u.reschedule_changes(to_micros(next_at)))

    async def _complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._resolve(task_id, token, attempt, u.COMPLETED)

    async def _dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._resolve(task_id, token, attempt, u.dead_letter_changes())

    async def _discard_completed(self, task_id: str, token: str, attempt: Attempt) -> None:
        with self._errors() as connection:
            deleted = await _retention.discard_claimed(connection, task_id, token)
        fence(task_id, found=deleted is not None, applied=bool(deleted))

    async def _discard_each(
        self, completions: list[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        """The completions that discard their task: one fenced ``delete_one`` each, sent at
        once (a bulk write does not say which of its deletes matched)."""
        with self._errors() as connection:
            deleted = await asyncio.gather(
                *(_retention.discard_claimed(connection, c.task_id, c.token) for c in completions)
            )
        return [
            None if gone else StaleClaim(c.task_id) if gone is False else NotFound(c.task_id)
            for c, gone in zip(completions, deleted, strict=True)
        ]

    async def _complete_many(
        self, completions: list[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        """One ordered bulk of the fenced updates ``complete`` makes. When some matched
        nothing, one read tells which: a task whose ``resolved_token`` is the completion's
        token was completed by it (tokens are never reused); otherwise the claim was stale,
        or the task is gone (``NotFound``). Completions that discard their task go apart
        (:meth:`_discard_each`)."""
        if any(item.discard for item in completions):
            kept = [item for item in completions if not item.discard]
            discarded = [item for item in completions if item.discard]
            outcomes = iter(await self._complete_many(kept) if kept else [])
            dropped = iter(await self._discard_each(discarded))
            return [next(dropped) if item.discard else next(outcomes) for item in completions]
        operations = [
            UpdateOne(
                f.claimed_with(item.task_id, item.token),
                u.resolve_update(attempt_to_document(item.attempt), item.token, u.COMPLETED),
            )
            for item in completions
        ]
        with self._errors() as connection:
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
        with self._errors() as connection:
            result = await connection.tasks.update_one(
                f.claimed_with(task_id, token),
                u.resolve_update(attempt_to_document(attempt), token, changes),
            )
            applied = result.matched_count > 0
            fence(
                task_id, found=applied or await self._exists(connection, task_id), applied=applied
            )

    @staticmethod
    async def _exists(connection: Connection, task_id: str) -> bool:
        """Whether the task exists (asked when a fenced update matched nothing: a stale
        claim, or a task that is gone)."""
        found = await connection.tasks.find_one({"_id": task_id}, projection={"_id": 1})
        return found is not None

    # --- DLQ -------------------------------------------------------------------------------

    async def _dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        with self._errors() as connection:
            return await _pages.dlq_page(connection, queue, dlq_filter, page)

    async def _dlq_groups(self, queue: str) -> list[DLQGroup]:
        with self._errors() as connection:
            return await _pages.dlq_groups(connection, queue)

    async def _redrive(self, queue: str, selector: Selector) -> int:
        selected = f.selected_filter(queue, selector, by_ids=(Status.DEAD,))
        with self._errors() as connection:
            result = await connection.tasks.update_many(selected, u.redrive_update())
        return result.modified_count

    async def _purge(self, queue: str, selector: Selector) -> int:
        selected = f.selected_filter(queue, selector, by_ids=(Status.DEAD, Status.CANCELLED))
        with self._errors() as connection:
            result = await connection.tasks.delete_many(selected)
        return result.deleted_count

    # --- every task ------------------------------------------------------------------------

    async def _get(self, task_id: str) -> Envelope:
        with self._errors() as connection:
            doc = await connection.tasks.find_one({"_id": task_id})
        if doc is None:
            raise NotFound(task_id)
        return envelope_from_document(doc)

    async def _list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        with self._errors() as connection:
            return await _pages.task_page(connection, queue, task_filter, page)

    async def _cancel(self, queue: str, task_ids: list[str]) -> int:
        with self._errors() as connection:
            result = await connection.tasks.update_many(
                f.cancellable(queue, task_ids), u.cancel_update()
            )
        return result.modified_count

    async def _list_queues(self) -> list[Stats]:
        with self._errors() as connection:
            return await _pages.queue_stats(connection, None)

    # --- audit trail -----------------------------------------------------------------------

    async def _append_audit(self, entry: AuditEntry) -> AuditEntry:
        entry_id = uuid.uuid4().hex
        with self._errors() as connection:
            doc = await connection.audit.find_one_and_update(
                {"_id": entry_id},
                u.audit_insert(audit_to_document(entry, entry_id)),
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
        if doc is None:
            raise StorageError(f"audit entry {entry_id} was not stored")
        return audit_from_document(doc)

    async def _list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        with self._errors() as connection:
            return await _pages.audit_page(connection, audit_filter, page)

    # --- control records (in _controls) ----------------------------------------------------

    async def _list_controls(self, queue: str | None) -> list[Control]:
        with self._errors() as connection:
            return await _controls.list_controls(connection, queue)

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        with self._errors() as connection:
            return await _controls.put_control(connection, control, expected_version)

    async def _delete_control(self, queue: str, key: str, expected_version: int) -> bool:
        with self._errors() as connection:
            return await _controls.delete_control(connection, queue, key, expected_version)

    async def _retry_now(self, queue: str, task_ids: list[str]) -> int:
        with self._errors() as connection:
            return await _controls.retry_now(connection, queue, task_ids)

    # --- the fleet ---------------------------------------------------------------------------

    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        with self._errors() as connection:
            return await _fleet.heartbeat(connection, info)

    async def _list_workers(self) -> list[WorkerInfo]:
        with self._errors() as connection:
            return await _fleet.list_workers(connection)

    async def _remove_worker(self, worker_id: str) -> bool:
        with self._errors() as connection:
            return await _fleet.remove_worker(connection, worker_id)

    async def _purge_workers(self, seen_before: datetime) -> int:
        with self._errors() as connection:
            return await _fleet.purge_workers(connection, seen_before)

    async def _add_counts(self, counts: list[Counts]) -> None:
        with self._errors() as connection:
            await _fleet.add_counts(connection, counts)

    async def _read_counts(self, queue: str | None, since: datetime) -> list[Counts]:
        with self._errors() as connection:
            return await _fleet.read_counts(connection, queue, since)

    async def _purge_counts(self, before: datetime) -> int:
        with self._errors() as connection:
            return await _fleet.purge_counts(connection, before)

    # --- operations ------------------------------------------------------------------------

    async def _now(self) -> datetime:
        with self._errors() as connection:
            return await server_now(connection)

    async def _stats(self, queue: str) -> Stats:
        with self._errors() as connection:
            (stats,) = await _pages.queue_stats(connection, queue)
        return stats

    async def _wait_due(self, queue: str, timeout: float) -> bool:
        """Block until a task of ``queue`` may be due (True) or ``timeout`` seconds pass
        (False); see ``_notify`` for how."""
        connection = self._connection()
        # The wait itself is exempt from the operation timeout; each call to the server in it
        # is bounded by it.
        with translate_errors(self._config.where):
            return await wait_due(connection, queue, timeout, self._config.timeout)

    async def _admit(self, task: Envelope, dedup: Dedup, delay: timedelta | None) -> Admitted:
        with self._errors() as connection:
            return await admit_dedup(connection, task, dedup, delay)

    async def _expire_tasks(self, queue: str, task_ids: list[str], before: datetime) -> int:
        with self._errors() as connection:
            return await _retention.expire_tasks(connection, queue, task_ids, before)

    async def _purge_succeeded(self, queue: str, older_than: datetime) -> int:
        with self._errors() as connection:
            result = await connection.tasks.delete_many(f.finished_before(queue, older_than))
        return result.deleted_count
