"""``PostgresStorage``: the storage contract on PostgreSQL through asyncpg.

Every operation is one SQL statement in autocommit (one round trip): due-ness, leases and
timestamps come from the database clock, claims use ``FOR UPDATE SKIP LOCKED`` and every
post-claim mutation is fenced on the claim token in its ``WHERE`` clause. ``StorageBase``
checks that the store is open and validates every argument; each ``_operation`` here is the
statement and the reading of its result, or a call of the module that holds them for the
newer half of the contract: :mod:`rdq_postgres._admission` (admission, ``enqueue_in``),
:mod:`rdq_postgres._claims` (claims, and the queues a control restricts),
:mod:`rdq_postgres._controls` (control records, ``retry_now``),
:mod:`rdq_postgres._fleet` (the worker registry and counts) and
:mod:`rdq_postgres._retention` (what leaves the store).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import msgspec

from rdq.errors import NotFound, StaleClaim
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
    StorageBase,
    TaskFilter,
    WorkerInfo,
    bounds,
    fence,
    group_order,
)
from rdq_postgres import _admission, _claims, _controls, _fleet, _retention
from rdq_postgres._codec import (
    attempt_args,
    audit_values,
    completion_results,
    envelope_from_row,
    filter_values,
    micros,
    stats_from_row,
)
from rdq_postgres._connection import Database
from rdq_postgres._errors import translate_errors
from rdq_postgres._migrate import apply_migrations
from rdq_postgres._notify import Announcer, DueListener
from rdq_postgres._pages import audit_page, dlq_page, task_page
from rdq_postgres._queries import Queries
from rdq_postgres._url import PostgresConfig, parse_url

__all__ = ["CAPABILITIES", "PostgresStorage"]

CAPABILITIES = Capabilities(
    contract_version=CONTRACT_VERSION,
    notify=True,
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
    control=True,
    worker_registry=True,
    counters=True,
    fair_shares=True,
    priority_aging=True,
    retention=True,
    dedup=True,
    payload_refs=True,
    discard_succeeded=True,
    reopen=True,
    transactional_enqueue=True,
)
"""What the store offers; ``notify`` follows the URL option of that name."""

_COUNT_CAP = bounds.EXACT_COUNT_THRESHOLD + 1
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
        self._capabilities = msgspec.structs.replace(CAPABILITIES, notify=self.config.notify)
        self._controlled: set[str] = set()
        """Queues claim.sql refused (a control restricts them): claimed with
        claim_controlled.sql until it says that none does any more."""
        self._lease_floor_raised: dict[str, float] = {}
        """When this store last raised each queue's lease floor (monotonic seconds)."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresStorage:
        """Build a store for ``url``; query parameters and ``options`` set
        :class:`PostgresConfig` (``ConfigError`` names a bad one)."""
        return cls(parse_url(url, **options))

    def __repr__(self) -> str:
        return f"PostgresStorage({self.endpoint}, schema={self.config.schema!r})"

    def capabilities(self) -> Capabilities:
        return self._capabilities

    def reopen(self) -> PostgresStorage:
        """A second store on the same data, with connections of its own (the worker's lease
        thread uses it). It keeps at most one connection open up front whatever ``pool_min``
        says and opens the others on demand, so it holds only what its callers use at once
        (the lease thread: two, docs/sizing.md)."""
        return PostgresStorage(
            dataclasses.replace(self.config, pool_min=min(self.config.pool_min, 1))
        )

    # --- lifecycle -------------------------------------------------------------------------

    async def _open(self) -> None:
        """Open the pool. Raises ``StorageUnavailable`` naming host:port when the server
        cannot be reached or refuses the credentials."""
        await self._db.open()

    async def _close(self) -> None:
        await self._announcer.aclose()
        await self._listener.close()
        await self._db.close()

    async def _migrate(self) -> list[str]:
        """Create or upgrade the schema under an advisory lock (idempotent, concurrent-safe),
        on a connection of its own without the operation timeout. Returns the migrations this
        call applied, in order (``["0001_task_table", …]``; ``[]`` when up to date)."""
        async with self._db.unbounded() as conn:
            return await apply_migrations(conn, self._sql)

    async def _notify(self, queues: list[str]) -> None:
        await self._db.execute(self._sql.notify, queues=queues)

    def _announce(self, *queues: str) -> None:
        if self.config.notify:
            self._announcer.announce(queues)

    # --- admission (the statements in _admission) -------------------------------------------

    @property
    def _announcing(self) -> Announcer | None:
        """The announcer of wake-ups, when NOTIFY is on (the URL option ``notify``)."""
        return self._announcer if self.config.notify else None

    async def _enqueue(self, task: Envelope, delay: timedelta | None) -> bool:
        return await _admission.enqueue(self._db, self._sql, self._announcing, task, delay)

    async def _enqueue_batch(self, tasks: list[Envelope], delay: timedelta | None) -> list[bool]:
        return await _admission.enqueue_batch(self._db, self._sql, self._announcing, tasks, delay)

    async def _import_tasks(self, tasks: list[Envelope]) -> list[bool]:
        return await _admission.import_tasks(self._db, self._sql, self._announcing, tasks)

    async def _enqueue_in(
        self, connection: object, tasks: list[Envelope], delay: timedelta | None
    ) -> list[bool]:
        """Admit ``tasks`` on ``connection`` — an asyncpg connection, a psycopg 3
        ``AsyncConnection`` or a SQLAlchemy ``AsyncConnection``/``AsyncSession`` the
        application owns — inside its transaction: they are stored when that transaction
        commits (and wake idle workers then) and never exist if it rolls back.

        The same admission as ``enqueue_batch``: idempotent by id (``False`` for an id
        already in the same queue, this transaction's own earlier tasks included),
        ``IDConflict`` for an id held by another queue, which leaves nothing of this call
        stored and the transaction usable. One statement; the store's own pool is not used.
        Driver errors are raised as ``StorageError`` (``StorageUnavailable`` when the
        connection is lost)."""
        return await _admission.enqueue_in(
            connection, self._sql, self.endpoint, tasks, delay, notify=self.config.notify
        )

    # --- claiming (the statements in _claims) ---------------------------------------------

    async def _claim_due(
        self, queue: str, limit: int, lease: timedelta, worker_id: str | None
    ) -> list[Claimed]:
        return await _claims.claim_due(
            self._db,
            self._sql,
            self._controlled,
            self._lease_floor_raised,
            queue,
            limit,
            lease,
            worker_id,
        )

    async def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        row = await self._db.fetchrow(
            self._sql.extend_lease, id=task_id, token=token, lease_us=micros(lease)
        )
        fence(task_id, found=row["found"], applied=row["lease_expires_at"] is not None)
        expires: datetime = row["lease_expires_at"]
        return expires

    # --- resolution ------------------------------------------------------------------------

    async def _resolve(
        self, name: str, task_id: str, token: str, attempt: Attempt, **more: Any
    ) -> asyncpg.Record:
        """Run resolution ``name`` (reschedule.sql, complete.sql, dead_letter.sql), fenced."""
        record, error_type = attempt_args(attempt)
        row = await self._db.fetchrow(
            self._sql.load(name),
            id=task_id,
            token=token,
            attempt=record,
            error_type=error_type,
            **more,
        )
        fence(task_id, found=row["found"], applied=row["done"])
        return row

    async def _reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        row = await self._resolve("reschedule", task_id, token, attempt, next_at=next_at)
        self._announce(row["queue"])

    async def _complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._resolve("complete", task_id, token, attempt)

    async def _dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._resolve("dead_letter", task_id, token, attempt)

    async def _discard_completed(self, task_id: str, token: str, attempt: Attempt) -> None:
        """discard_completed.sql: the claimed task deleted, fenced (the attempt is not
        stored: nothing of the task is)."""
        row = await self._db.fetchrow(self._sql.discard_completed, id=task_id, token=token)
        fence(task_id, found=row["found"], applied=row["done"])

    async def _complete_many(
        self, completions: list[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        """``complete`` for many claims in one statement, each fenced on its own token.

        An id given twice is applied at most once: its later items report ``StaleClaim``."""
        first = {item.task_id: item for item in reversed(completions)}
        items = list(first.values())
        encoded = [attempt_args(item.attempt) for item in items]
        columns: dict[str, Any] = {
            "ids": [item.task_id for item in items],
            "tokens": [item.token for item in items],
            "attempts": [record for record, _ in encoded],
            "error_types": [error_type for _, error_type in encoded],
        }
        if any(item.discard for item in items):  # complete_many_discarding.sql: some delete
            discards = [item.discard for item in items]
            row = await self._db.fetchrow(
                self._sql.complete_many_discarding, **columns, discards=discards
            )
        else:
            row = await self._db.fetchrow(self._sql.complete_many, **columns)
        return completion_results(completions, first, row)

    # --- DLQ -------------------------------------------------------------------------------

    async def _dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return await dlq_page(self._db, self._sql, queue, dlq_filter, page)

    async def _dlq_groups(self, queue: str) -> list[DLQGroup]:
        """Counted in SQL over the queue's DEAD tasks (task_dlq_idx)."""
        rows = await self._db.fetch(self._sql.dlq_groups, queue=queue)
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

    async def _redrive(self, queue: str, selector: Selector) -> int:
        if selector.ids is not None:
            row = await self._db.fetchrow(
                self._sql.redrive_ids, queue=queue, ids=list(selector.ids)
            )
        else:
            row = await self._db.fetchrow(
                self._sql.redrive_filter, queue=queue, **filter_values(selector.filter)
            )
        count: int = row["n"]
        if count:
            self._announce(queue)
        return count

    async def _purge(self, queue: str, selector: Selector) -> int:
        if selector.ids is not None:
            return await self._db.execute(self._sql.purge_ids, queue=queue, ids=list(selector.ids))
        return await self._db.execute(
            self._sql.purge_filter, queue=queue, **filter_values(selector.filter)
        )

    # --- every task ------------------------------------------------------------------------

    async def _get(self, task_id: str) -> Envelope:
        rows = await self._db.fetch(self._sql.get, id=task_id)
        if not rows:
            raise NotFound(task_id)
        return envelope_from_row(rows[0])

    async def _list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return await task_page(self._db, self._sql, queue, task_filter, page)

    async def _cancel(self, queue: str, task_ids: list[str]) -> int:
        return await self._db.execute(self._sql.cancel, queue=queue, ids=task_ids)

    async def _list_queues(self) -> list[Stats]:
        """The queue names from a loose index scan, then every queue's stats (see ``stats``
        for the counts), the queues split over a few statements that run at once."""
        names: list[str] = (await self._db.fetchrow(self._sql.queue_names))["queues"] or []
        # a few statements at once, each on its own connection (counting is CPU-bound)
        parallel = max(1, min(_OVERVIEW_CONNECTIONS, self.config.pool_max, len(names)))
        chunks = [names[i::parallel] for i in range(parallel)] if names else []
        pages = await asyncio.gather(
            *(self._db.fetch(self._sql.stats, queues=chunk, stop=_COUNT_CAP) for chunk in chunks)
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

    async def _append_audit(self, entry: AuditEntry) -> AuditEntry:
        row = await self._db.fetchrow(self._sql.append_audit, **audit_values(entry))
        return msgspec.structs.replace(entry, id=row["id"], time=row["time"])

    async def _list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        return await audit_page(self._db, self._sql, audit_filter, page)

    # --- control records (the statements in _controls) -----------------------------------

    async def _list_controls(self, queue: str | None) -> list[Control]:
        return await _controls.list_controls(self._db, self._sql, queue)

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        return await _controls.put_control(self._db, self._sql, control, expected_version)

    async def _delete_control(self, queue: str, key: str, expected_version: int) -> bool:
        return await _controls.delete_control(self._db, self._sql, queue, key, expected_version)

    async def _retry_now(self, queue: str, task_ids: list[str]) -> int:
        moved = await _controls.retry_now(self._db, self._sql, queue, task_ids)
        if moved:
            self._announce(queue)
        return moved

    # --- the fleet and counts (the statements in _fleet) --------------------------------------

    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        return await _fleet.heartbeat_worker(self._db, self._sql, info)

    async def _list_workers(self) -> list[WorkerInfo]:
        return await _fleet.list_workers(self._db, self._sql)

    async def _remove_worker(self, worker_id: str) -> bool:
        return await _fleet.remove_worker(self._db, self._sql, worker_id)

    async def _purge_workers(self, seen_before: datetime) -> int:
        return await _fleet.purge_workers(self._db, self._sql, seen_before)

    async def _add_counts(self, counts: list[Counts]) -> None:
        await _fleet.add_counts(self._db, self._sql, counts)

    async def _read_counts(self, queue: str | None, since: datetime) -> list[Counts]:
        return await _fleet.read_counts(self._db, self._sql, queue, since)

    async def _purge_counts(self, before: datetime) -> int:
        return await _fleet.purge_counts(self._db, self._sql, before)

    # --- operations ------------------------------------------------------------------------

    async def _now(self) -> datetime:
        row = await self._db.fetchrow(self._sql.now)
        now: datetime = row["now"]
        return now

    async def _stats(self, queue: str) -> Stats:
        """Counts up to ``bounds.EXACT_COUNT_THRESHOLD`` are exact (each reads at most that
        many index entries); above it they are the planner's estimate from the table's
        statistics (named in ``Stats.estimated``)."""
        row = await self._db.fetchrow(self._sql.stats, queues=[queue], stop=_COUNT_CAP)
        return stats_from_row(row, _COUNT_CAP)

    async def _purge_succeeded(self, queue: str, older_than: datetime) -> int:
        row = await self._db.fetchrow(self._sql.purge_succeeded, queue=queue, older_than=older_than)
        deleted: int = row["n"]
        return deleted

    async def _admit(self, task: Envelope, dedup: Dedup, delay: timedelta | None) -> Admitted:
        return await _admission.admit(self._db, self._sql, self._announcing, task, dedup, delay)

    async def _held_payload_refs(self, refs: list[str]) -> set[str]:
        return await _retention.held_payload_refs(self._db, self._sql, refs)

    async def _expire_tasks(self, queue: str, task_ids: list[str], before: datetime) -> int:
        return await _retention.expire_tasks(self._db, self._sql, queue, task_ids, before)

    async def _wait_due(self, queue: str, timeout: float) -> bool:
        """Block until a task of ``queue`` may be due (a NOTIFY from an enqueue, reschedule or
        redrive, or the earliest due time passing) or ``timeout`` seconds pass."""
        if not self.config.notify:
            raise self._unsupported("notify")  # turned off for this store (notify=false)
        with translate_errors(self.endpoint, self._db.lost):
            await self._listener.ensure()

        async def next_due() -> tuple[datetime, datetime | None]:
            row = await self._db.fetchrow(self._sql.next_due, queue=queue)
            return row["now"], row["next_due"]

        return await self._listener.wait(queue, timeout, next_due)
