"""``PostgresStorage``: the storage contract on PostgreSQL through asyncpg.

Every operation is one SQL statement in autocommit (one round trip): due-ness, leases and
timestamps come from the database clock, claims use ``FOR UPDATE SKIP LOCKED`` and every
post-claim mutation is fenced on the claim token in its ``WHERE`` clause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import msgspec

from rdq.errors import (
    IDConflict,
    NotConnected,
    NotFound,
    RdqError,
    StaleClaim,
    StorageError,
    ValidationError,
)
from rdq.spi import (
    FORMAT_VERSION,
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
    StorageBase,
    limits,
)
from rdq_postgres._codec import attempt_args, encode_json, enqueue_args, envelope_from_row
from rdq_postgres._connection import ConnectionPool, open_connection
from rdq_postgres._errors import translate_errors
from rdq_postgres._migrate import apply_migrations
from rdq_postgres._notify import Announcer, DueListener
from rdq_postgres._queries import Queries
from rdq_postgres._url import PostgresConfig, endpoint, parse_url

__all__ = ["PostgresStorage"]

_ZERO = timedelta(0)
_ID_CONFLICT = "RQ409"  # raised by the id_conflict() function of migration 0002
_encode = msgspec.json.Encoder().encode


class PostgresStorage(StorageBase):
    """The PostgreSQL store. Build it with :meth:`from_url` (or from a
    :class:`PostgresConfig`); ``connect`` opens the pool."""

    def __init__(self, config: PostgresConfig | None = None) -> None:
        self.config = config or PostgresConfig()
        self.endpoint = endpoint(self.config.dsn)
        self._sql = Queries(self.config.schema, self.config.channel)
        self._pool: ConnectionPool | None = None
        self._listener = DueListener(self._connect_one, self.config.channel)
        self._announcer = Announcer(self._notify)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresStorage:
        """Build a store for ``url``; query parameters and ``options`` set
        :class:`PostgresConfig` (``ConfigError`` names a bad one)."""
        return cls(parse_url(url, **options))

    def __repr__(self) -> str:
        return f"PostgresStorage({self.endpoint}, schema={self.config.schema!r})"

    # --- lifecycle -------------------------------------------------------------------------

    async def _connect_one(self) -> asyncpg.Connection:
        return await open_connection(self.config)

    async def _open(self) -> None:
        """Open the pool. Raises ``StorageUnavailable`` naming host:port when the server
        cannot be reached or refuses the credentials."""
        pool = ConnectionPool(self._connect_one, self.config.pool_min, self.config.pool_max)
        with translate_errors(self.endpoint):
            try:
                await pool.start()
            except BaseException:
                pool.terminate()
                raise
        self._pool = pool

    async def _close(self) -> None:
        await self._announcer.aclose()
        await self._listener.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def _lost(self) -> None:
        # The server went away: every idle connection of the pool is dead too. Replace them
        # all on next use, so one failed operation, not one per pooled connection, reports it.
        if self._pool is not None:
            self._pool.expire()

    def _ready(self) -> ConnectionPool:
        """The pool of an open store (``NotConnected`` otherwise)."""
        pool = self._pool
        if pool is None:
            self._check_open()
            raise NotConnected(type(self).__name__)  # closing: _close has taken the pool
        return pool

    async def _fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        pool = self._ready()
        with translate_errors(self.endpoint, self._lost):
            rows: list[asyncpg.Record] = await pool.fetch(query, *args)
            return rows

    async def _fetchrow(self, query: str, *args: Any) -> asyncpg.Record:
        """The one row a statement that always returns one row returned."""
        pool = self._ready()
        with translate_errors(self.endpoint, self._lost):
            row: asyncpg.Record | None = await pool.fetchrow(query, *args)
        if row is None:
            raise StorageError(f"PostgreSQL at {self.endpoint}: a statement returned no row")
        return row

    async def _execute(self, query: str, *args: Any) -> int:
        """Run a DELETE/UPDATE; return the number of rows it touched."""
        pool = self._ready()
        with translate_errors(self.endpoint, self._lost):
            status: str = await pool.execute(query, *args)
        return int(status.rsplit(" ", 1)[-1])

    async def migrate(self) -> None:
        """Create or upgrade the schema under an advisory lock (idempotent, concurrent-safe)."""
        self._check_open()
        pool = self._ready()
        with translate_errors(self.endpoint, self._lost):
            async with pool.connection() as conn:
                await apply_migrations(conn, self.config.schema, self.config.channel)

    async def _notify(self, queues: list[str]) -> None:
        await self._execute(self._sql.notify, queues)

    def _announce(self, *queues: str) -> None:
        if self.config.notify:
            self._announcer.announce(queues)

    def capabilities(self) -> Capabilities:
        return Capabilities(
            notify=self.config.notify,
            filter_pushdown=True,
            batch_enqueue=True,
            batch_complete=True,
        )

    # --- admission -------------------------------------------------------------------------

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        self._check_open()
        limits.check_task(task)
        limits.check_delay(delay)
        args = enqueue_args(task)
        if await self._fetch(self._sql.enqueue, *args[:10], delay or _ZERO, *args[10:]):
            self._announce(task.queue)
            return True
        # The id is taken (the rare path: a second round trip to say by which queue).
        rows = await self._fetch(self._sql.existing_queue, task.id)
        if rows and rows[0]["queue"] != task.queue:
            raise IDConflict(task.id, rows[0]["queue"])
        return False

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        self._check_open()
        limits.check_delay(delay)
        payloads = _checked_payloads(tasks)
        first_queue: dict[str, str] = {}
        unique: list[tuple[Envelope, str]] = []
        for task, payload in zip(tasks, payloads, strict=True):
            # duplicates within the batch: the first occurrence counts
            queue = first_queue.setdefault(task.id, task.queue)
            if len(first_queue) > len(unique):
                unique.append((task, payload))
            elif queue != task.queue:
                raise IDConflict(task.id, queue)
        if not unique:
            return []
        if all(_fresh(task) for task, _ in unique):
            row = await self._admit(
                self._sql.enqueue_batch_fresh,
                [task.id for task, _ in unique],
                _compact([task.queue for task, _ in unique]),
                _compact([task.handler_ref for task, _ in unique]),
                [payload for _, payload in unique],
                [encode_json(task.headers) if task.headers else "{}" for task, _ in unique]
                if any(task.headers for task, _ in unique)
                else [],
                FORMAT_VERSION,
                delay or _ZERO,
            )
        else:
            columns = zip(*(enqueue_args(task, payload) for task, payload in unique), strict=True)
            row = await self._admit(self._sql.enqueue_batch, *map(list, columns), delay or _ZERO)
        present = set(row["present"] or ())
        stored = {task.id for task, _ in unique if task.id not in present}
        self._announce(*{task.queue for task, _ in unique if task.id in stored})
        if len(stored) == len(tasks):
            return [True] * len(tasks)
        result = []
        for task in tasks:
            result.append(task.id in stored)
            stored.discard(task.id)
        return result

    async def _admit(self, query: str, *args: Any) -> asyncpg.Record:
        """Run a batch enqueue statement; its RQ409 error becomes ``IDConflict``."""
        pool = self._ready()
        with translate_errors(self.endpoint, self._lost):
            try:
                row: asyncpg.Record | None = await pool.fetchrow(query, *args)
            except asyncpg.PostgresError as exc:
                if exc.sqlstate == _ID_CONFLICT:
                    raise _id_conflict(exc, self.endpoint) from None
                raise
        if row is None:
            raise StorageError(f"PostgreSQL at {self.endpoint}: a statement returned no row")
        return row

    # --- claiming --------------------------------------------------------------------------

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        self._check_open()
        limits.check_queue(queue)
        limits.check_worker_id(worker_id)
        limits.check_limit(limit)
        limits.check_lease(lease)
        rows = await self._fetch(self._sql.claim, queue, limit, lease)
        if len(rows) > 1:
            rows.sort(key=lambda r: (r["claimed_due_at"], r["id"]))
        return [Claimed(envelope_from_row(row), row["token"]) for row in rows]

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        self._check_open()
        limits.check_task_id(task_id)
        limits.check_token(token)
        limits.check_lease(lease)
        row = await self._fetchrow(self._sql.extend_lease, task_id, token, lease)
        expires: datetime | None = row["lease_expires_at"]
        if expires is None:
            raise StaleClaim(task_id) if row["found"] else NotFound(task_id)
        return expires

    # --- resolution ------------------------------------------------------------------------

    def _check_resolution(self, task_id: str, token: str, attempt: Attempt) -> None:
        limits.check_task_id(task_id)
        limits.check_token(token)
        limits.check_attempt(attempt)

    @staticmethod
    def _fenced(task_id: str, row: asyncpg.Record) -> None:
        if not row["done"]:
            raise StaleClaim(task_id) if row["found"] else NotFound(task_id)

    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        self._check_open()
        self._check_resolution(task_id, token, attempt)
        limits.check_aware(next_at, "next_at")
        row = await self._fetchrow(
            self._sql.reschedule, task_id, token, *attempt_args(attempt), next_at
        )
        self._fenced(task_id, row)
        self._announce(row["queue"])

    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        self._check_open()
        self._check_resolution(task_id, token, attempt)
        row = await self._fetchrow(self._sql.complete, task_id, token, *attempt_args(attempt))
        self._fenced(task_id, row)

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        """``complete`` for many claims in one statement, each fenced on its own token.

        An id given twice is applied at most once: its later items report ``StaleClaim``."""
        self._check_open()
        for item in completions:  # validate every item before changing anything
            if not isinstance(item, Completion):
                raise ValidationError("must be rdq.spi.Completion items", field="completions")
            self._check_resolution(item.task_id, item.token, item.attempt)
        first = {item.task_id: item for item in reversed(completions)}
        if not first:
            return []
        items = list(first.values())
        encoded = [attempt_args(item.attempt) for item in items]
        row = await self._fetchrow(
            self._sql.complete_many,
            [item.task_id for item in items],
            [item.token for item in items],
            [json for json, _ in encoded],
            [error_type for _, error_type in encoded],
        )
        done = set(row["done"] or ())
        found = done.union(row["found"] or ())  # found is only looked up when some failed
        results: list[StaleClaim | NotFound | None] = []
        for item in completions:
            if item.task_id in done and first.get(item.task_id) is item:
                results.append(None)
            elif item.task_id in found:
                results.append(StaleClaim(item.task_id))
            else:
                results.append(NotFound(item.task_id))
        return results

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        self._check_open()
        self._check_resolution(task_id, token, attempt)
        row = await self._fetchrow(self._sql.dead_letter, task_id, token, *attempt_args(attempt))
        self._fenced(task_id, row)

    # --- DLQ -------------------------------------------------------------------------------

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        self._check_open()
        limits.check_queue(queue)
        limits.check_page(page)
        if dlq_filter is not None:
            limits.check_filter(dlq_filter)
        args = (queue, *_filter_args(dlq_filter), page.include_attempts, page.limit + 1)
        if page.cursor is None:
            rows = await self._fetch(self._sql.dlq_first, *args)
        else:
            cursor = DLQCursor.decode(page.cursor, queue, dlq_filter)
            rows = await self._fetch(self._sql.dlq_next, *args, cursor.dead_lettered_at, cursor.id)
        tasks = [envelope_from_row(row) for row in rows[: page.limit]]
        if len(rows) <= page.limit or not tasks:
            return tasks, None
        last = rows[page.limit - 1]
        cursor = DLQCursor.after(queue, dlq_filter, last["dead_lettered_at"], last["id"])
        return tasks, cursor.encode()

    async def get(self, task_id: str) -> Envelope:
        self._check_open()
        limits.check_task_id(task_id)
        rows = await self._fetch(self._sql.get, task_id)
        if not rows:
            raise NotFound(task_id)
        return envelope_from_row(rows[0])

    async def redrive(self, queue: str, selector: Selector) -> int:
        self._check_open()
        limits.check_queue(queue)
        limits.check_selector(selector)
        if selector.ids is not None:
            row = await self._fetchrow(self._sql.redrive_ids, queue, list(selector.ids))
        else:
            row = await self._fetchrow(
                self._sql.redrive_filter, queue, *_filter_args(selector.filter)
            )
        count: int = row["n"]
        if count:
            self._announce(queue)
        return count

    async def purge(self, queue: str, selector: Selector) -> int:
        self._check_open()
        limits.check_queue(queue)
        limits.check_selector(selector)
        if selector.ids is not None:
            return await self._execute(self._sql.purge_ids, queue, list(selector.ids))
        return await self._execute(self._sql.purge_filter, queue, *_filter_args(selector.filter))

    # --- operations ------------------------------------------------------------------------

    async def stats(self, queue: str) -> Stats:
        self._check_open()
        limits.check_queue(queue)
        row = await self._fetchrow(self._sql.stats, queue)
        now: datetime = row["as_of"]
        oldest: datetime | None = row["oldest_due"]
        return Stats(
            queue=queue,
            pending=row["pending"],
            in_flight=row["in_flight"],
            dlq_depth=row["dead"],
            succeeded=row["succeeded"],
            oldest_pending_age=None if oldest is None else (now - oldest).total_seconds(),
            as_of=now,
        )

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        self._check_open()
        limits.check_queue(queue)
        limits.check_aware(older_than, "older_than")
        return await self._execute(self._sql.purge_succeeded, queue, older_than)

    async def wait_due(self, queue: str, timeout: float) -> bool:
        """Block until a task of ``queue`` may be due (a NOTIFY from an enqueue, reschedule or
        redrive, or the earliest due time passing) or ``timeout`` seconds pass."""
        self._check_open()
        limits.check_queue(queue)
        if not isinstance(timeout, int | float) or timeout < 0:
            raise ValidationError("must be a non-negative number of seconds", field="timeout")
        if not self.config.notify:
            raise NotImplementedError("notify is turned off for this store (notify=false)")
        self._ready()
        with translate_errors(self.endpoint, self._lost):
            await self._listener.ensure()
        future = self._listener.register(queue)
        try:
            row = await self._fetchrow(self._sql.next_due, queue)
            now: datetime = row["now"]
            next_due: datetime | None = row["next_due"]
            if next_due is not None and next_due <= now:
                return True
            wait, timed = float(timeout), False
            if next_due is not None and (next_due - now).total_seconds() < wait:
                wait, timed = (next_due - now).total_seconds(), True
            try:
                return await asyncio.wait_for(future, wait)
            except TimeoutError:
                return timed
        finally:
            self._listener.unregister(queue, future)


def _checked_payloads(tasks: Sequence[Envelope]) -> list[str]:
    """``limits.check_task`` for every task, in order (so a batch is refused exactly as one
    ``enqueue`` per task would be); returns each payload encoded as JSON."""
    payloads = []
    for task in tasks:
        limits.check_task(task)
        payloads.append(_encode(task.payload).decode())
    return payloads


def _compact(values: list[str]) -> list[str]:
    """``values``, or only its first when all are the same (enqueue_batch_fresh.sql)."""
    first = values[0]
    return [first] if values.count(first) == len(values) else values


def _fresh(task: Envelope) -> bool:
    """True if ``task`` is new (what ``Client.submit`` builds): stored by
    ``enqueue_batch_fresh`` with constants for everything but names, payload and headers."""
    return (
        task.attempt_count == 0
        and task.redrive_count == 0
        and not task.attempts
        and task.retry is None
        and task.next_attempt_at is None
        and task.format_version == FORMAT_VERSION
        and not task.extra
    )


def _id_conflict(exc: asyncpg.PostgresError, endpoint: str) -> RdqError:
    """The ``IDConflict`` that the RQ409 error of a batch enqueue names in its detail."""
    try:
        found = msgspec.json.decode(getattr(exc, "detail", None) or "", type=dict[str, str])
        return IDConflict(found["id"], found["queue"])
    except (msgspec.DecodeError, KeyError):
        return StorageError(f"PostgreSQL at {endpoint}: {type(exc).__name__}: {exc}")


def _filter_args(dlq_filter: DLQFilter | None) -> tuple[Any, ...]:
    f = dlq_filter or DLQFilter()
    error_type = None if f.error_type is None else f.error_type.replace("\x00", "\ufffd")
    return (error_type, f.handler_ref, f.dead_lettered_after, f.dead_lettered_before)
