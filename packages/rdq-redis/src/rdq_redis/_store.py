"""``RedisStorage``: the storage contract on Redis, every mutation one Lua script.

:class:`~rdq.spi.StorageBase` checks that the store is open and validates every argument; the
``_operations`` here run the scripts (see :mod:`rdq_redis._args` for their arguments), or call
the module that runs them for the newer half of the contract: :mod:`rdq_redis._admission`
(admission), :mod:`rdq_redis._claims` (claims), :mod:`rdq_redis._controls` (control records,
``retry_now``), :mod:`rdq_redis._fleet` (the worker registry and the counts) and
:mod:`rdq_redis._retention` (what leaves the store). What a fenced
script's refusal means is in :mod:`rdq_redis._fencing`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import msgspec

from rdq.errors import NotConnected, NotFound, StaleClaim
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
)
from rdq_redis import _admission, _args, _claims, _controls, _fencing, _fleet, _retention
from rdq_redis._cluster import forget_ids, forget_queue
from rdq_redis._codec import (
    audit_body,
    envelope_from_hash,
    from_us,
    hash_pairs,
    score_us,
    to_us,
)
from rdq_redis._connection import Client, Connection, Scripts, open_connection
from rdq_redis._errors import translate_errors
from rdq_redis._eviction import check_eviction
from rdq_redis._keys import LAYOUT, AuditKeys, QueueKeys, registry_key
from rdq_redis._migrate import check_layout, migrate, older_layout_error, stored_layout
from rdq_redis._notify import Waiters
from rdq_redis._pages import audit_page, dlq_page, task_page
from rdq_redis._url import RedisConfig, parse_url

__all__ = ["CAPABILITIES", "RedisStorage"]

_PURGE_BATCH = 500

CAPABILITIES = Capabilities(
    contract_version=CONTRACT_VERSION,
    notify=True,
    filter_pushdown=True,
    batch_enqueue=True,
    batch_complete=True,
    overlapping_completions=True,
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
"""What the store offers, on one server and on Cluster alike: everything but
``enqueue_in`` (Redis has no transaction of the application's to join)."""


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

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def reopen(self) -> RedisStorage:
        """A second store on the same data, with connections of its own."""
        return RedisStorage(self._config)

    # --- lifecycle -------------------------------------------------------------------------

    async def _open(self) -> None:
        connection = await open_connection(self._config)
        try:
            client = connection.client
            scripts = Scripts(client, self._address)
            waiters = Waiters(client, self._next_due, self._address)
            await check_eviction(client, self._address, allow=self._config.allow_eviction)
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
        """The open session (``NotConnected`` if a concurrent ``aclose`` dropped it)."""
        if self._session is None:
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
                raise await older_layout_error(
                    client, found or session.layout, self._prefix, self._address
                )
            session.layout = found
        return session.scripts

    def _redis(self) -> Client:
        return self._live().connection.client

    async def _migrate(self) -> list[str]:
        """Redis has no schema: check the server's version, load every script into its cache
        and upgrade keys of an older layout. (Whether the server may evict keys is checked at
        every open: see :mod:`rdq_redis._eviction`.)"""
        session = self._live()
        client = session.connection.client
        applied = await migrate(
            client, session.scripts, self._prefix, self._address, cluster=self._cluster
        )
        session.layout = LAYOUT
        return applied

    @property
    def _indexed(self) -> str:
        """'1' when the scripts keep the id index themselves (not on Redis Cluster)."""
        return "0" if self._cluster else "1"

    def _keys(self, queue: str) -> QueueKeys:
        return QueueKeys(self._prefix, queue)

    async def _next_due(self, qk: QueueKeys) -> tuple[int, int | None]:
        reply = await self._live().scripts.run("next_due", [qk.levels], [qk.base])
        return int(reply[0]), score_us(reply[1]) if reply[1] else None

    # --- admission (the scripts' calls in _admission) ----------------------------------------

    async def _enqueue(self, task: Envelope, delay: timedelta | None) -> bool:
        return (await self._enqueue_batch([task], delay))[0]

    async def _enqueue_batch(self, tasks: list[Envelope], delay: timedelta | None) -> list[bool]:
        rows = _admission.enqueue_rows(tasks, self._prefix, delay)
        scripts = await self._ready()
        return await _admission.admit(scripts, self._redis, self._config, "enqueue", tasks, rows)

    async def _import_tasks(self, tasks: list[Envelope]) -> list[bool]:
        rows = _admission.import_rows(tasks, self._prefix)
        scripts = await self._ready()
        return await _admission.admit(
            scripts, self._redis, self._config, "import_tasks", tasks, rows
        )

    # --- claiming (the script's call in _claims) ----------------------------------------------

    async def _claim_due(
        self, queue: str, limit: int, lease: timedelta, worker_id: str | None
    ) -> list[Claimed]:
        scripts = await self._ready()
        return await _claims.claim_due(scripts, self._prefix, queue, limit, lease, worker_id)

    async def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        scripts = await self._ready()
        qk = await _fencing.claim_keys(self._redis, self._config, task_id, token)
        reply = await scripts.run(
            "extend_lease", [qk.levels], [qk.base, task_id, token, _args.micros(lease)]
        )
        await _fencing.check(self._redis, self._config, task_id, reply[0])
        return from_us(int(reply[1]))

    # --- resolution ------------------------------------------------------------------------

    async def _reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        await self._resolve(task_id, token, attempt, "PENDING", str(to_us(next_at)))

    async def _complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._resolve(task_id, token, attempt, "SUCCEEDED")

    async def _dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._resolve(task_id, token, attempt, "DEAD")

    async def _resolve(
        self, task_id: str, token: str, attempt: Attempt, status: str, next_at_us: str = ""
    ) -> None:
        scripts = await self._ready()
        qk = await _fencing.claim_keys(self._redis, self._config, task_id, token)
        args = _args.resolve_args(qk, task_id, token, status, attempt, next_at_us)
        reply = await scripts.run("resolve", [qk.levels], args)
        await _fencing.check(self._redis, self._config, task_id, reply[0])

    async def _complete_many(
        self, completions: list[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        """``complete`` for many claims in one script call (one per queue on Redis Cluster),
        each fenced on its own token; a lost claim's error is returned in its place."""
        scripts = await self._ready()
        outcomes: list[bytes | None] = [None] * len(completions)  # None: the token names no queue
        batches = _args.completion_batches(completions, self._prefix, self._cluster)
        for positions, keys, args in batches:
            reply = await scripts.run("complete_many", keys, args)
            for i, outcome in zip(positions, reply, strict=True):
                outcomes[i] = outcome
        for positions, qk, pairs in _args.discard_batches(completions, self._prefix):
            reply = await self._discard(qk, pairs)
            for i, outcome in zip(positions, reply, strict=True):
                outcomes[i] = outcome
        results: list[StaleClaim | NotFound | None] = []
        for item, outcome in zip(completions, outcomes, strict=True):
            if outcome == b"OK":  # the common case needs no call of the fence
                results.append(None)
                continue
            try:
                await _fencing.check(self._redis, self._config, item.task_id, outcome)
            except (StaleClaim, NotFound) as exc:
                results.append(exc)
            else:
                results.append(None)
        return results

    async def _discard_completed(self, task_id: str, token: str, attempt: Attempt) -> None:
        qk = await _fencing.claim_keys(self._redis, self._config, task_id, token)
        (outcome,) = await self._discard(qk, [task_id, token])
        await _fencing.check(self._redis, self._config, task_id, outcome)

    async def _discard(self, qk: QueueKeys, pairs: list[str]) -> list[bytes]:
        """``discard_many.lua`` for (id, token) ``pairs`` of one queue: the outcome of each;
        on Redis Cluster the deleted ids leave the index as purged ones do."""
        scripts = await self._ready()
        args = [qk.base, self._prefix, self._indexed, self._registry, qk.queue, *pairs]
        outcomes, deleted, empty = await scripts.run("discard_many", [qk.levels], args)
        await self._after_purge(qk, deleted, empty)
        return list(outcomes)

    async def _queue_of(self, task_id: str) -> str | None:
        return await _fencing.queue_of(self._redis, self._config, task_id)

    # --- DLQ -------------------------------------------------------------------------------

    async def _dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return await dlq_page(await self._ready(), self._keys(queue), dlq_filter, page)

    async def _dlq_groups(self, queue: str) -> list[DLQGroup]:
        scripts = await self._ready()
        qk = self._keys(queue)
        return _args.dlq_groups(await scripts.run("dlq_groups", [qk.levels], [qk.base]))

    async def _redrive(self, queue: str, selector: Selector) -> int:
        scripts = await self._ready()
        qk = self._keys(queue)
        args = [qk.base, qk.wake, *_args.selector_args(selector)]
        return int(await scripts.run("redrive", [qk.levels], args))

    async def _purge(self, queue: str, selector: Selector) -> int:
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
        return not _args.holds_tasks(await self._stats(queue))

    # --- every task ------------------------------------------------------------------------

    async def _get(self, task_id: str) -> Envelope:
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

    async def _list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return await task_page(await self._ready(), self._keys(queue), task_filter, page)

    async def _cancel(self, queue: str, task_ids: list[str]) -> int:
        scripts = await self._ready()
        qk = self._keys(queue)
        return int(await scripts.run("cancel", [qk.levels], [qk.base, *task_ids]))

    async def _list_queues(self) -> list[Stats]:
        await self._ready()
        with translate_errors(self._address):
            names = await self._redis().smembers(registry_key(self._prefix))
        found = []
        for name in sorted(n.decode() if isinstance(n, bytes) else str(n) for n in names):
            stats = await self._stats(name)
            if _args.holds_tasks(stats):
                found.append(stats)
        return found

    # --- audit trail -----------------------------------------------------------------------

    async def _append_audit(self, entry: AuditEntry) -> AuditEntry:
        scripts = await self._ready()
        keys = AuditKeys(self._prefix)
        entry_id, time_us = await scripts.run(
            "audit_append",
            [keys.log, keys.seq],
            [keys.base, entry.queue, entry.action, entry.actor, audit_body(entry)],
        )
        return msgspec.structs.replace(entry, id=entry_id.decode(), time=from_us(int(time_us)))

    async def _list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        return await audit_page(await self._ready(), AuditKeys(self._prefix), audit_filter, page)

    # --- control records (the scripts' calls in _controls) -----------------------------------

    async def _list_controls(self, queue: str | None) -> list[Control]:
        return await _controls.list_controls(await self._ready(), self._redis, self._config, queue)

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        scripts = await self._ready()
        return await _controls.put_control(
            scripts, self._redis, self._config, control, expected_version
        )

    async def _delete_control(self, queue: str, key: str, expected_version: int) -> bool:
        scripts = await self._ready()
        return await _controls.delete_control(
            scripts, self._redis, self._config, queue, key, expected_version
        )

    async def _retry_now(self, queue: str, task_ids: list[str]) -> int:
        return await _controls.retry_now(await self._ready(), self._prefix, queue, task_ids)

    # --- the fleet and counts (the scripts' calls in _fleet) --------------------------------

    async def _heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        return await _fleet.heartbeat_worker(await self._ready(), self._prefix, info)

    async def _list_workers(self) -> list[WorkerInfo]:
        return await _fleet.list_workers(await self._ready(), self._prefix)

    async def _remove_worker(self, worker_id: str) -> bool:
        return await _fleet.remove_worker(await self._ready(), self._prefix, worker_id)

    async def _purge_workers(self, seen_before: datetime) -> int:
        return await _fleet.purge_workers(await self._ready(), self._prefix, seen_before)

    async def _add_counts(self, counts: list[Counts]) -> None:
        await _fleet.add_counts(await self._ready(), self._prefix, counts)

    async def _read_counts(self, queue: str | None, since: datetime) -> list[Counts]:
        return await _fleet.read_counts(await self._ready(), self._prefix, queue, since)

    async def _purge_counts(self, before: datetime) -> int:
        return await _fleet.purge_counts(await self._ready(), self._prefix, before)

    # --- operations ------------------------------------------------------------------------

    async def _now(self) -> datetime:
        with translate_errors(self._address):
            seconds, micros = await self._redis().time()
        return from_us(int(seconds) * 1_000_000 + int(micros))

    async def _stats(self, queue: str) -> Stats:
        scripts = await self._ready()
        qk = self._keys(queue)
        return _args.stats(queue, await scripts.run("stats", [qk.levels], [qk.base]))

    async def _purge_succeeded(self, queue: str, older_than: datetime) -> int:
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

    async def _admit(self, task: Envelope, dedup: Dedup, delay: timedelta | None) -> Admitted:
        scripts = await self._ready()
        return await _admission.admit_dedup(scripts, self._redis, self._config, task, dedup, delay)

    async def _expire_tasks(self, queue: str, task_ids: list[str], before: datetime) -> int:
        qk = self._keys(queue)
        deleted, empty = await _retention.expire_tasks(
            await self._ready(),
            qk,
            prefix=self._prefix,
            indexed=self._indexed,
            registry=self._registry,
            ids=task_ids,
            before=before,
        )
        await self._after_purge(qk, deleted, empty)
        return len(deleted)

    async def _wait_due(self, queue: str, timeout: float) -> bool:
        await self._ready()
        return await self._live().waiters.wait(self._keys(queue), timeout)
