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
    NotFound,
    StaleClaim,
    ValidationError,
)
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
    StorageBase,
    TaskFilter,
    audit_scope,
    group_order,
    limits,
    task_scope,
)
from rdq_postgres._admission import Admission, admission, admission_in, importing, stored_flags
from rdq_postgres._codec import (
    attempt_args,
    audit_args,
    audit_from_row,
    completion_results,
    enqueue_args,
    envelope_from_row,
    filter_args,
    micros,
    stats_from_row,
    text_column,
)
from rdq_postgres._connection import Database
from rdq_postgres._errors import translate_errors
from rdq_postgres._migrate import apply_migrations
from rdq_postgres._notify import Announcer, DueListener
from rdq_postgres._outbox import driver_errors, runner_for
from rdq_postgres._queries import Queries
from rdq_postgres._url import PostgresConfig, parse_url

__all__ = ["PostgresStorage"]

_COUNT_CAP = limits.EXACT_COUNT_THRESHOLD + 1
_OVERVIEW_CONNECTIONS = 4
"""At most this many statements of ``list_queues`` run at once."""


class PostgresStorage(StorageBase):
    """The PostgreSQL store. Build it with :meth:`from_url` (or from a
    :class:`PostgresConfig`); ``connect`` opens the pool."""

    def __init__(self, config: PostgresConfig | None = None) -> None:
        self.config = config or PostgresConfig()
        self._db = Database(self.config, type(self).__name__)
        self.endpoint = self._db.endpoint
        self._sql = Queries(self.config.schema, self.config.channel)
        self._listener = DueListener(self._db.connect_one, self.config.channel)
        self._announcer = Announcer(self._notify, interval=self.config.notify_interval)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresStorage:
        """Build a store for ``url``; query parameters and ``options`` set
        :class:`PostgresConfig` (``ConfigError`` names a bad one)."""
        return cls(parse_url(url, **options))

    def __repr__(self) -> str:
        return f"PostgresStorage({self.endpoint}, schema={self.config.schema!r})"

    # --- lifecycle -------------------------------------------------------------------------

    async def _open(self) -> None:
        """Open the pool. Raises ``StorageUnavailable`` naming host:port when the server
        cannot be reached or refuses the credentials."""
        await self._db.open()

    async def _close(self) -> None:
        await self._announcer.aclose()
        await self._listener.close()
        await self._db.close()

    async def migrate(self) -> list[str]:
        """Create or upgrade the schema under an advisory lock (idempotent, concurrent-safe).
        Returns the migrations this call applied, in order (``["0001_task_table", …]``; ``[]``
        when the schema was up to date)."""
        self._check_open()
        async with self._db.unbounded() as conn:
            return await apply_migrations(conn, self.config.schema, self.config.channel)

    async def _notify(self, queues: list[str]) -> None:
        await self._db.execute(self._sql.notify, queues)

    def _announce(self, *queues: str) -> None:
        if self.config.notify:
            self._announcer.announce(queues)

    def reopen(self) -> PostgresStorage:
        """A second store on the same data, with connections of its own."""
        return PostgresStorage(self.config)

    def capabilities(self) -> Capabilities:
        return Capabilities(
            reopen=True,
            notify=self.config.notify,
            filter_pushdown=True,
            batch_enqueue=True,
            batch_complete=True,
            group_pushdown=True,
        )

    # --- admission -------------------------------------------------------------------------

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        self._check_open()
        limits.check_task(task)
        limits.check_delay(delay)
        if await self._db.fetch(self._sql.enqueue, *enqueue_args(task), micros(delay)):
            self._announce(task.queue)
            return True
        # The id is taken (the rare path: a second round trip to say by which queue).
        rows = await self._db.fetch(self._sql.existing_queue, task.id)
        if rows and rows[0]["queue"] != task.queue:
            raise IDConflict(task.id, rows[0]["queue"])
        return False

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        self._check_open()
        batch = admission(self._sql, tasks, delay)
        if batch is None:
            return []
        stored = await self._admit(batch)
        self._announce(*batch.queues(stored))
        return stored_flags(tasks, stored)

    async def enqueue_in(
        self, connection: object, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        """Admit ``tasks`` on ``connection`` — an asyncpg connection, a psycopg 3
        ``AsyncConnection`` or a SQLAlchemy ``AsyncConnection``/``AsyncSession`` the
        application owns — inside its transaction: they are stored when that transaction
        commits (and wake idle workers then) and never exist if it rolls back.

        The same admission as ``enqueue_batch``: every task checked first
        (``ValidationError``), idempotent by id (``False`` for an id already in the same
        queue, this transaction's own earlier tasks included), ``IDConflict`` for an id held
        by another queue, which leaves nothing of this call stored and the transaction
        usable. One statement; the store's own pool is not used. Driver errors are raised as
        ``StorageError`` (``StorageUnavailable`` when the connection is lost)."""
        self._check_open()
        batch = admission_in(self._sql, tasks, delay, notify=self.config.notify)
        if batch is None:
            return []
        runner = await runner_for(connection)
        with driver_errors(self.endpoint):
            row = await runner.fetchrow(batch.query, batch.args)
            stored = set(row["stored"] or ())
            if row["conflict_id"] is not None:
                if stored:  # our own rows, not yet visible to anyone else
                    await runner.execute(self._sql.unadmit, [sorted(stored)])
                raise IDConflict(row["conflict_id"], row["conflict_queue"])
        return stored_flags(tasks, stored)

    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        self._check_open()
        batch = importing(self._sql, tasks)
        if batch is None:
            return []
        stored = await self._admit(batch)
        self._announce(*batch.queues(stored))
        return stored_flags(tasks, stored)

    async def _admit(self, batch: Admission) -> set[str]:
        """Run a batch admission statement; the ids it stored. An id in another queue fails
        the whole statement (RQ409: nothing stored), raised as ``IDConflict``."""
        return batch.stored(await self._db.fetchrow(batch.query, *batch.args))

    # --- claiming --------------------------------------------------------------------------

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        self._check_open()
        limits.check_queue(queue)
        limits.check_worker_id(worker_id)
        limits.check_limit(limit)
        limits.check_lease(lease)
        rows = await self._db.fetch(self._sql.claim, queue, limit, micros(lease), worker_id)
        if len(rows) > 1:
            # the claim order (RETURNING has none); ties stay as they came: the order of ids
            # is the database's, never compared here
            rows.sort(key=lambda r: (-r["priority"], r["claimed_due_at"]))
        return [Claimed(envelope_from_row(row), row["token"]) for row in rows]

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        self._check_open()
        limits.check_task_id(task_id)
        limits.check_token(token)
        limits.check_lease(lease)
        row = await self._db.fetchrow(self._sql.extend_lease, task_id, token, micros(lease))
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
        row = await self._db.fetchrow(
            self._sql.reschedule, task_id, token, *attempt_args(attempt), next_at
        )
        self._fenced(task_id, row)
        self._announce(row["queue"])

    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        self._check_open()
        self._check_resolution(task_id, token, attempt)
        row = await self._db.fetchrow(self._sql.complete, task_id, token, *attempt_args(attempt))
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
        row = await self._db.fetchrow(
            self._sql.complete_many,
            [item.task_id for item in items],
            [item.token for item in items],
            [json for json, _ in encoded],
            [error_type for _, error_type in encoded],
        )
        return completion_results(completions, first, row)

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        self._check_open()
        self._check_resolution(task_id, token, attempt)
        row = await self._db.fetchrow(self._sql.dead_letter, task_id, token, *attempt_args(attempt))
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
        args = (queue, *filter_args(dlq_filter), page.include_attempts, page.limit + 1)
        if page.cursor is None:
            rows = await self._db.fetch(self._sql.dlq_first, *args)
        else:
            cursor = DLQCursor.decode(page.cursor, queue, dlq_filter)
            rows = await self._db.fetch(
                self._sql.dlq_next, *args, cursor.dead_lettered_at, cursor.id
            )
        tasks = [envelope_from_row(row) for row in rows[: page.limit]]
        if len(rows) <= page.limit or not tasks:
            return tasks, None
        last = rows[page.limit - 1]
        cursor = DLQCursor.after(queue, dlq_filter, last["dead_lettered_at"], last["id"])
        return tasks, cursor.encode()

    async def get(self, task_id: str) -> Envelope:
        self._check_open()
        limits.check_task_id(task_id)
        rows = await self._db.fetch(self._sql.get, task_id)
        if not rows:
            raise NotFound(task_id)
        return envelope_from_row(rows[0])

    async def redrive(self, queue: str, selector: Selector) -> int:
        self._check_open()
        limits.check_queue(queue)
        limits.check_selector(selector)
        if selector.ids is not None:
            row = await self._db.fetchrow(self._sql.redrive_ids, queue, list(selector.ids))
        else:
            row = await self._db.fetchrow(
                self._sql.redrive_filter, queue, *filter_args(selector.filter)
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
            return await self._db.execute(self._sql.purge_ids, queue, list(selector.ids))
        return await self._db.execute(self._sql.purge_filter, queue, *filter_args(selector.filter))

    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        """Counted in SQL over the queue's DEAD tasks (task_dlq_idx)."""
        self._check_open()
        limits.check_queue(queue)
        rows = await self._db.fetch(self._sql.dlq_groups, queue)
        groups = [
            DLQGroup(
                handler_ref=row["handler_ref"],
                error_type=row["error_type"],
                count=row["n"],
                first_dead_lettered_at=row["first_at"],
                last_dead_lettered_at=row["last_at"],
            )
            for row in rows
        ]
        groups.sort(key=group_order)
        return groups

    # --- every task ------------------------------------------------------------------------

    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        self._check_open()
        limits.check_queue(queue)
        limits.check_task_filter(task_filter)
        limits.check_page(page)
        scope = task_scope(queue, task_filter)
        args: tuple[Any, ...] = (
            queue,
            text_column(task_filter.error_type),
            task_filter.handler_ref,
            task_filter.after,
            task_filter.before,
            page.include_attempts,
            page.limit + 1,
        )
        status = task_filter.status
        if page.cursor is None:
            rows = await self._db.fetch(self._sql.list_tasks(status, after=False), *args)
        else:
            cursor = KeysetCursor.decode(page.cursor, scope)
            query = self._sql.list_tasks(status, after=True)
            rows = await self._db.fetch(query, *args, cursor.at, cursor.id)
        tasks = [envelope_from_row(row) for row in rows[: page.limit]]
        if len(rows) <= page.limit:
            return tasks, None
        last = rows[page.limit - 1]
        return tasks, KeysetCursor.after(scope, last["listed_at"], last["id"]).encode()

    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        self._check_open()
        limits.check_queue(queue)
        if isinstance(task_ids, str) or not isinstance(task_ids, Sequence):
            raise ValidationError("must be a sequence of task ids", field="ids")
        if len(task_ids) > limits.MAX_SELECTOR_IDS:
            raise ValidationError(f"more than {limits.MAX_SELECTOR_IDS} ids", field="ids")
        ids = limits.check_ids(task_ids, "ids")
        if not ids:
            return 0
        return await self._db.execute(self._sql.cancel, queue, ids)

    async def list_queues(self) -> list[Stats]:
        """The queue names from a loose index scan, then every queue's stats (see ``stats``
        for the counts), the queues split over a few statements that run at once."""
        self._check_open()
        names: list[str] = (await self._db.fetchrow(self._sql.queue_names))["queues"] or []
        # a few statements at once, each on its own connection (counting is CPU-bound)
        parallel = max(1, min(_OVERVIEW_CONNECTIONS, self.config.pool_max, len(names)))
        chunks = [names[i::parallel] for i in range(parallel)] if names else []
        pages = await asyncio.gather(
            *(self._db.fetch(self._sql.stats, _COUNT_CAP, chunk) for chunk in chunks)
        )
        queues = [stats_from_row(row, _COUNT_CAP) for rows in pages for row in rows]
        queues.sort(key=lambda stats: stats.queue)
        # a queue emptied between the two statements no longer holds a task
        return [
            s
            for s in queues
            if s.pending or s.in_flight or s.dlq_depth or s.succeeded or s.cancelled
        ]

    # --- audit trail -----------------------------------------------------------------------

    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        self._check_open()
        limits.check_audit_entry(entry)
        row = await self._db.fetchrow(self._sql.append_audit, *audit_args(entry))
        return msgspec.structs.replace(entry, id=row["id"], time=row["time"])

    async def list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        self._check_open()
        if audit_filter is not None:
            limits.check_audit_filter(audit_filter)
        limits.check_page(page)
        f = audit_filter or AuditFilter()
        scope = audit_scope(audit_filter)
        args = (
            text_column(f.queue),
            text_column(f.action),
            text_column(f.actor),
            f.after,
            f.before,
            page.limit + 1,
        )
        if page.cursor is None:
            rows = await self._db.fetch(self._sql.list_audit(after=False), *args)
        else:
            cursor = KeysetCursor.decode(page.cursor, scope)
            query = self._sql.list_audit(after=True)
            rows = await self._db.fetch(query, *args, cursor.at, cursor.id)
        entries = [audit_from_row(row) for row in rows[: page.limit]]
        if len(rows) <= page.limit:
            return entries, None
        last = rows[page.limit - 1]
        return entries, KeysetCursor.after(scope, last["time"], last["id"]).encode()

    # --- operations ------------------------------------------------------------------------

    async def now(self) -> datetime:
        self._check_open()
        row = await self._db.fetchrow(self._sql.now)
        now: datetime = row["now"]
        return now

    async def stats(self, queue: str) -> Stats:
        """Counts up to ``limits.EXACT_COUNT_THRESHOLD`` are exact (each reads at most that
        many index entries); above it they are the planner's estimate from the table's
        statistics (named in ``Stats.estimated``)."""
        self._check_open()
        limits.check_queue(queue)
        row = await self._db.fetchrow(self._sql.stats, _COUNT_CAP, [queue])
        return stats_from_row(row, _COUNT_CAP)

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        self._check_open()
        limits.check_queue(queue)
        limits.check_aware(older_than, "older_than")
        row = await self._db.fetchrow(self._sql.purge_succeeded, queue, older_than)
        deleted: int = row["n"]
        return deleted

    async def wait_due(self, queue: str, timeout: float) -> bool:
        """Block until a task of ``queue`` may be due (a NOTIFY from an enqueue, reschedule or
        redrive, or the earliest due time passing) or ``timeout`` seconds pass."""
        self._check_open()
        limits.check_queue(queue)
        if not isinstance(timeout, int | float) or timeout < 0:
            raise ValidationError("must be a non-negative number of seconds", field="timeout")
        if not self.config.notify:
            raise NotImplementedError("notify is turned off for this store (notify=false)")
        with translate_errors(self.endpoint, self._db.lost):
            await self._listener.ensure()

        async def next_due() -> tuple[datetime, datetime | None]:
            row = await self._db.fetchrow(self._sql.next_due, queue)
            return row["now"], row["next_due"]

        return await self._listener.wait(queue, float(timeout), next_due)
