"""``RedisStorage``: the storage contract on Redis, every mutation one Lua script."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import msgspec

from rdq.errors import NotConnected, NotFound, StaleClaim
from rdq.spi import (
    Attempt,
    AuditEntry,
    AuditFilter,
    Capabilities,
    Claimed,
    Completion,
    DLQFilter,
    DLQGroup,
    Envelope,
    Page,
    Selector,
    Stats,
    Status,
    StorageBase,
    TaskFilter,
    limits,
)
from rdq_redis import _args
from rdq_redis._cluster import admit_on_cluster, forget_ids, forget_queue
from rdq_redis._codec import (
    envelope_from_hash,
    error_arg,
    from_us,
    hash_pairs,
    score_us,
    to_us,
)
from rdq_redis._connection import Client, Connection, open_connection
from rdq_redis._errors import translate_errors
from rdq_redis._keys import LAYOUT, AuditKeys, QueueKeys, index_key, registry_key
from rdq_redis._migrate import check_layout, layout_error, migrate, stored_layout
from rdq_redis._notify import Waiters
from rdq_redis._pages import audit_page, dlq_page, task_page
from rdq_redis._queries import Scripts
from rdq_redis._url import RedisConfig, parse_url

__all__ = ["RedisStorage"]

_PURGE_BATCH = 500


@dataclass
class _Session:
    """What an open store holds: its connection, scripts, pub/sub listeners, and the key
    layout found under its prefix."""

    connection: Connection
    scripts: Scripts
    waiters: Waiters
    layout: int = field(default=LAYOUT)


class RedisStorage(StorageBase):
    """rdq's Redis backend (``redis://`` and ``rediss://``) on redis-py's asyncio client.

    Every operation that changes state is one Lua script, so it is atomic; due-ness and
    leases use the server's ``TIME``. Build it with :meth:`from_url` (or ``open_storage``)
    and use it as an async context manager."""

    def __init__(self, config: RedisConfig) -> None:
        self._config = config
        self._prefix = config.prefix
        self._address = config.address
        self._cluster = config.cluster
        self._registry = "" if config.cluster else registry_key(config.prefix)
        self._session: _Session | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStorage:
        return cls(parse_url(url, **options))

    def __repr__(self) -> str:
        return f"RedisStorage(address={self._address!r}, prefix={self._prefix!r})"

    # --- lifecycle -------------------------------------------------------------------------

    async def _open(self) -> None:
        connection = await open_connection(self._config)
        try:
            client = connection.client
            scripts = Scripts(client, self._address)
            waiters = Waiters(client, self._next_due, self._address)
            layout = await check_layout(client, self._prefix, self._address)
        except BaseException:
            await connection.aclose()
            raise
        self._session = _Session(connection, scripts, waiters, layout)

    async def _close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.waiters.aclose()
            await session.connection.aclose()

    def _live(self) -> _Session:
        """The open session; ``NotConnected`` before ``connect`` and after ``aclose``."""
        self._check_open()
        if self._session is None:  # closed by a concurrent aclose
            raise NotConnected(type(self).__name__, closed=True)
        return self._session

    async def _ready(self) -> Scripts:
        """The scripts of the open session, once the keys are known to be in this release's
        layout (another process may have migrated them since this store opened)."""
        session = self._live()
        if session.layout != LAYOUT:
            client = session.connection.client
            found = await stored_layout(client, self._prefix, self._address)
            if found != LAYOUT:
                raise layout_error(found or session.layout, self._prefix, self._address)
            session.layout = found
        return session.scripts

    def _redis(self) -> Client:
        return self._live().connection.client

    async def migrate(self) -> None:
        """Redis has no schema: check the server (version; a WARNING on logger ``rdq_redis``
        if it may evict keys, which would lose tasks), load every script into its cache and
        upgrade keys of an older layout."""
        session = self._live()
        await migrate(
            session.connection.client,
            session.scripts,
            self._prefix,
            self._address,
            cluster=self._cluster,
        )
        session.layout = LAYOUT

    def reopen(self) -> RedisStorage:
        """A second store on the same data, with connections of its own."""
        return RedisStorage(self._config)

    def capabilities(self) -> Capabilities:
        return Capabilities(
            reopen=True,
            notify=True,
            filter_pushdown=True,
            batch_enqueue=True,
            batch_complete=True,
            group_pushdown=True,
        )

    @property
    def _indexed(self) -> str:
        """'1' when the scripts keep the id index themselves (not on Redis Cluster)."""
        return "0" if self._cluster else "1"

    def _keys(self, queue: str) -> QueueKeys:
        return QueueKeys(self._prefix, queue)

    async def _next_due(self, qk: QueueKeys) -> tuple[int, int | None]:
        reply = await self._live().scripts.run("next_due", [qk.levels], [qk.base])
        return int(reply[0]), score_us(reply[1]) if reply[1] else None

    # --- admission -------------------------------------------------------------------------

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        self._check_open()
        return (await self.enqueue_batch([task], delay=delay))[0]

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        self._check_open()
        limits.check_delay(delay)
        checked = [limits.check_task(task) for task in tasks]
        if not checked:
            return []
        delay_us = (delay or timedelta(0)) // timedelta(microseconds=1)
        rows = [_args.enqueue_row(task, self._keys(task.queue), delay_us) for task in checked]
        return await self._admit("enqueue", checked, rows)

    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        self._check_open()
        checked = limits.check_imported_tasks(tasks)
        if not checked:
            return []
        rows = [_args.import_row(task, self._keys(task.queue)) for task in checked]
        return await self._admit("import_tasks", checked, rows)

    async def _admit(self, script: str, tasks: list[Envelope], rows: list[list[Any]]) -> list[bool]:
        """Run an admitting script (``enqueue`` or ``import_tasks``): one call on a single
        server; on Cluster the ids are reserved and the queues registered first, then one call
        per queue."""
        scripts = await self._ready()
        if not self._cluster:
            keys: list[str] = []
            args: list[Any] = [len(tasks), "1", self._registry]
            for task, row in zip(tasks, rows, strict=True):
                qk = self._keys(task.queue)
                keys += [qk.levels, qk.task(task.id), index_key(self._prefix, task.id)]
                args += row
            return _args.admitted(await scripts.run(script, keys, args))
        return await admit_on_cluster(
            self._redis(), scripts, self._prefix, self._address, script, tasks, rows
        )

    async def put_corrupt_task(
        self, queue: str, task_id: str, raw: str = "{not json", *, kind: str = "undecodable"
    ) -> None:
        """Test hook: store a PENDING task of ``queue``, due now, as a hand edit would, whose
        ``body`` is ``raw`` (which must not decode), or, by ``kind``, a payload nested deeper
        than any decoder recurses (``"deep"``) or a ``created_at`` past the year 9999
        (``"far_time"``). Reads return it with ``corrupt`` set; the compliance kit's
        corrupt-task clauses use this."""
        self._check_open()
        limits.check_queue(queue)
        limits.check_task_id(task_id)
        await self._ready()
        if await self._queue_of(task_id) is not None:
            raise ValueError(f"task {task_id!r} exists already")
        qk = self._keys(queue)
        due = to_us(await self.now())
        client = self._redis()
        with translate_errors(self._address):
            await client.set(index_key(self._prefix, task_id), queue)
            await client.sadd(registry_key(self._prefix), queue)
            await client.hset(qk.task(task_id), mapping=_args.corrupt_hash(raw, due, kind))
            await client.zadd(qk.pending(0), {task_id: due})
            await client.zadd(qk.levels, {"0": 0})

    # --- claiming --------------------------------------------------------------------------

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        self._check_open()
        limits.check_queue(queue)
        limits.check_worker_id(worker_id)
        limits.check_limit(limit)
        limits.check_lease(lease)
        scripts = await self._ready()
        qk = self._keys(queue)
        # The token names the queue, so resolving a claim needs no id -> queue lookup.
        tokens = [f"{queue}/{secrets.token_hex(16)}" for _ in range(limit)]
        reply = await scripts.run(
            "claim_due",
            [qk.levels],
            [qk.base, _args.micros(lease), error_arg(worker_id), *tokens],
        )
        return [
            Claimed(
                envelope_from_hash(
                    hash_pairs(fields),
                    task_id=task_id.decode(),
                    queue=queue,
                    status=Status.IN_FLIGHT,
                ),
                token.decode(),
            )
            for task_id, token, fields in reply
        ]

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        self._check_open()
        limits.check_task_id(task_id)
        limits.check_token(token)
        limits.check_lease(lease)
        scripts = await self._ready()
        qk = await self._claim_keys(task_id, token)
        reply = await scripts.run(
            "extend_lease", [qk.levels], [qk.base, task_id, token, _args.micros(lease)]
        )
        await self._check_fenced(reply, task_id)
        return from_us(int(reply[1]))

    # --- resolution ------------------------------------------------------------------------

    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        self._check_open()
        limits.check_aware(next_at, "next_at")
        await self._resolve(task_id, token, attempt, "PENDING", str(to_us(next_at)))

    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        self._check_open()
        await self._resolve(task_id, token, attempt, "SUCCEEDED")

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        self._check_open()
        await self._resolve(task_id, token, attempt, "DEAD")

    async def _resolve(
        self, task_id: str, token: str, attempt: Attempt, status: str, next_at_us: str = ""
    ) -> None:
        limits.check_task_id(task_id)
        limits.check_token(token)
        limits.check_attempt(attempt)
        scripts = await self._ready()
        qk = await self._claim_keys(task_id, token)
        args = _args.resolve_args(qk, task_id, token, status, attempt, next_at_us)
        await self._check_fenced(await scripts.run("resolve", [qk.levels], args), task_id)

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        """``complete`` for many claims in one script call (one per queue on Redis Cluster),
        each fenced on its own token; a lost claim's error is returned in its place."""
        self._check_open()
        _args.check_completions(completions)
        scripts = await self._ready()
        results: list[StaleClaim | NotFound | None] = [None] * len(completions)
        batches, unheld = _args.completion_batches(completions, self._prefix, self._cluster)
        for positions, keys, args in batches:
            reply = await scripts.run("complete_many", keys, args)
            for i, outcome in zip(positions, reply, strict=True):
                if outcome == b"STALE":
                    results[i] = StaleClaim(completions[i].task_id)
                elif outcome == b"NOTFOUND":
                    unheld.append(i)
        for i in unheld:
            results[i] = await self._not_held(completions[i].task_id)
        return results

    async def _claim_keys(self, task_id: str, token: str) -> QueueKeys:
        """The keys of the queue a claim token names (a foreign token names any queue: the
        script then finds no such task there and the index decides)."""
        queue = _args.token_queue(token)
        if queue is None:
            raise await self._not_held(task_id)
        return self._keys(queue)

    async def _check_fenced(self, reply: Any, task_id: str) -> None:
        if reply[0] == b"OK":
            return
        if reply[0] == b"STALE":
            raise StaleClaim(task_id)
        raise await self._not_held(task_id)

    async def _not_held(self, task_id: str) -> StaleClaim | NotFound:
        """The error for a token that does not hold ``task_id``: ``NotFound`` if no such
        task exists, else ``StaleClaim``."""
        if await self._queue_of(task_id) is None:
            return NotFound(task_id)
        return StaleClaim(task_id)

    async def _queue_of(self, task_id: str) -> str | None:
        with translate_errors(self._address):
            queue = await self._redis().get(index_key(self._prefix, task_id))
        if isinstance(queue, bytes):
            return queue.decode()
        return queue

    # --- DLQ -------------------------------------------------------------------------------

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        self._check_open()
        limits.check_queue(queue)
        limits.check_page(page)
        if dlq_filter is not None:
            limits.check_filter(dlq_filter)
        return await dlq_page(await self._ready(), self._keys(queue), dlq_filter, page)

    async def get(self, task_id: str) -> Envelope:
        self._check_open()
        limits.check_task_id(task_id)
        scripts = await self._ready()
        queue = await self._queue_of(task_id)
        if queue is None:
            raise NotFound(task_id)
        qk = self._keys(queue)
        status, fields = await scripts.run("get_task", [qk.task(task_id)], [qk.base, task_id])
        if not fields:
            raise NotFound(task_id)  # purged between the two reads
        return envelope_from_hash(
            hash_pairs(fields),
            task_id=task_id,
            queue=queue,
            status=Status(status.decode()) if status else None,
        )

    async def redrive(self, queue: str, selector: Selector) -> int:
        self._check_open()
        limits.check_queue(queue)
        limits.check_selector(selector)
        scripts = await self._ready()
        qk = self._keys(queue)
        args = [qk.base, qk.wake, *_args.selector_args(selector)]
        return int(await scripts.run("redrive", [qk.levels], args))

    async def purge(self, queue: str, selector: Selector) -> int:
        self._check_open()
        limits.check_queue(queue)
        limits.check_selector(selector)
        scripts = await self._ready()
        qk = self._keys(queue)
        args = [qk.base, self._prefix, self._indexed, self._registry, queue]
        args += _args.selector_args(selector)
        deleted, empty = await scripts.run("purge", [qk.levels], args)
        await self._after_purge(qk, deleted, empty)
        return len(deleted)

    async def _after_purge(self, qk: QueueKeys, deleted: list[bytes], empty: int) -> None:
        """On Redis Cluster, drop the purged ids from the index and an emptied queue from the
        registry (on a single server the scripts did both)."""
        if not self._cluster:
            return
        client = self._redis()
        await forget_ids(client, self._prefix, self._address, deleted)
        if empty:
            await forget_queue(
                client, self._prefix, self._address, qk.queue, lambda: self._is_empty(qk.queue)
            )

    async def _is_empty(self, queue: str) -> bool:
        return not _args.holds_tasks(await self.stats(queue))

    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        self._check_open()
        limits.check_queue(queue)
        scripts = await self._ready()
        qk = self._keys(queue)
        return _args.dlq_groups(await scripts.run("dlq_groups", [qk.levels], [qk.base]))

    # --- every task ------------------------------------------------------------------------

    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        self._check_open()
        limits.check_queue(queue)
        limits.check_task_filter(task_filter)
        limits.check_page(page)
        return await task_page(await self._ready(), self._keys(queue), task_filter, page)

    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        self._check_open()
        limits.check_queue(queue)
        ids = limits.check_ids(task_ids)
        if not ids:
            return 0
        scripts = await self._ready()
        qk = self._keys(queue)
        return int(await scripts.run("cancel", [qk.levels], [qk.base, *ids]))

    async def list_queues(self) -> list[Stats]:
        self._check_open()
        await self._ready()
        with translate_errors(self._address):
            names = await self._redis().smembers(registry_key(self._prefix))
        found = []
        for name in sorted(n.decode() if isinstance(n, bytes) else str(n) for n in names):
            stats = await self.stats(name)
            if _args.holds_tasks(stats):
                found.append(stats)
        return found

    # --- audit trail -----------------------------------------------------------------------

    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        self._check_open()
        limits.check_audit_entry(entry)
        scripts = await self._ready()
        keys = AuditKeys(self._prefix)
        body = msgspec.json.encode(msgspec.structs.replace(entry, id=None, time=None))
        entry_id, time_us = await scripts.run(
            "audit_append",
            [keys.log, keys.seq],
            [keys.base, entry.queue, entry.action, entry.actor, body],
        )
        return msgspec.structs.replace(entry, id=entry_id.decode(), time=from_us(int(time_us)))

    async def list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        self._check_open()
        if audit_filter is not None:
            limits.check_audit_filter(audit_filter)
        limits.check_page(page)
        return await audit_page(await self._ready(), AuditKeys(self._prefix), audit_filter, page)

    # --- operations ------------------------------------------------------------------------

    async def now(self) -> datetime:
        self._check_open()
        with translate_errors(self._address):
            seconds, micros = await self._redis().time()
        return from_us(int(seconds) * 1_000_000 + int(micros))

    async def stats(self, queue: str) -> Stats:
        self._check_open()
        limits.check_queue(queue)
        scripts = await self._ready()
        qk = self._keys(queue)
        return _args.stats(queue, await scripts.run("stats", [qk.levels], [qk.base]))

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        self._check_open()
        limits.check_queue(queue)
        limits.check_aware(older_than, "older_than")
        scripts = await self._ready()
        qk = self._keys(queue)
        cutoff = to_us(older_than)
        args = [qk.base, self._prefix, cutoff, _PURGE_BATCH, self._indexed, self._registry, queue]
        total = 0
        while True:
            deleted, empty = await scripts.run("purge_succeeded", [qk.levels], args)
            await self._after_purge(qk, deleted, empty)
            total += len(deleted)
            if len(deleted) < _PURGE_BATCH:
                return total

    async def wait_due(self, queue: str, timeout: float) -> bool:
        self._check_open()
        limits.check_queue(queue)
        _args.check_timeout(timeout)
        await self._ready()
        return await self._live().waiters.wait(self._keys(queue), float(timeout))
