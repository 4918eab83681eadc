"""``RedisStorage``: the storage contract on Redis, every mutation one Lua script."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from redis.exceptions import NoScriptError

from rdq.errors import (
    IDConflict,
    NotConnected,
    NotFound,
    StaleClaim,
    StorageError,
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
    StorageBase,
    limits,
)
from rdq_redis._cluster import forget_ids, reserve_ids
from rdq_redis._codec import (
    attempt_json,
    attempts_json,
    envelope_body,
    envelope_from_hash,
    from_us,
    hash_pairs,
    to_us,
)
from rdq_redis._connection import Client, Connection, open_connection
from rdq_redis._errors import translate_errors
from rdq_redis._keys import QueueKeys, index_key
from rdq_redis._migrate import migrate
from rdq_redis._notify import Waiters
from rdq_redis._queries import Scripts
from rdq_redis._url import RedisConfig, parse_url

__all__ = ["RedisStorage"]

_US = timedelta(microseconds=1)
_DLQ_SCAN_BUDGET = 2000
"""DLQ entries one ``dlq_page`` script call may examine (bounds how long it blocks Redis)."""
_PURGE_BATCH = 500


def _us(delta: timedelta) -> int:
    return delta // _US


@dataclass(frozen=True)
class _Session:
    """What an open store holds: its connection, its scripts, its pub/sub listeners."""

    connection: Connection
    scripts: Scripts
    waiters: Waiters


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
        self._session: _Session | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStorage:
        return cls(parse_url(url, **options))

    def __repr__(self) -> str:
        return f"RedisStorage(address={self._address!r}, prefix={self._prefix!r})"

    # --- lifecycle -------------------------------------------------------------------------

    async def _open(self) -> None:
        connection = await open_connection(self._config)
        scripts = Scripts(connection.client)
        waiters = Waiters(connection.client, scripts.next_due, self._address)
        self._session = _Session(connection, scripts, waiters)

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

    def _ready(self) -> Scripts:
        return self._live().scripts

    def _redis(self) -> Client:
        return self._live().connection.client

    async def migrate(self) -> None:
        """Redis has no schema: check the server (version; a WARNING on logger ``rdq_redis``
        if it may evict keys, which would lose tasks) and load every script into its cache."""
        session = self._live()
        await migrate(
            session.connection.client, session.scripts, self._address, cluster=self._cluster
        )

    def capabilities(self) -> Capabilities:
        return Capabilities(
            notify=True, filter_pushdown=True, batch_enqueue=True, batch_complete=True
        )

    @property
    def _indexed(self) -> str:
        """'1' when the scripts keep the id index themselves (not on Redis Cluster)."""
        return "0" if self._cluster else "1"

    def _keys(self, queue: str) -> QueueKeys:
        return QueueKeys(self._prefix, queue)

    async def _run(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        with translate_errors(self._address):
            try:
                return await script(keys=keys, args=args)
            except NoScriptError:
                # redis-py reloaded the script and the server lost it again before the call (a
                # flush or failover in between, or a Cluster node that missed the load): send
                # the text itself once. EVAL runs it exactly like EVALSHA would.
                return await self._redis().eval(script.script, len(keys), *keys, *args)

    # --- admission -------------------------------------------------------------------------

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        self._check_open()
        return (await self.enqueue_batch([task], delay=delay))[0]

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        self._check_open()
        if delay is not None and (not isinstance(delay, timedelta) or delay < timedelta(0)):
            raise ValidationError("must be a non-negative timedelta", field="delay")
        checked = [limits.check_task(task) for task in tasks]
        if not checked:
            return []
        self._ready()
        delay_us = _us(delay or timedelta(0))
        if self._cluster:
            return await self._enqueue_on_cluster(checked, delay_us)
        keys: list[str] = []
        args: list[Any] = [len(checked), "1"]
        for task in checked:
            qk = self._keys(task.queue)
            keys += [qk.pending, qk.task(task.id), index_key(self._prefix, task.id)]
            args += _enqueue_args(task, qk, delay_us)
        return await self._run_enqueue(keys, args)

    async def _run_enqueue(self, keys: list[str], args: list[Any]) -> list[bool]:
        reply = await self._run(self._ready().enqueue, keys, args)
        if reply[0] == b"IDCONFLICT":
            raise IDConflict(reply[1].decode(), reply[2].decode())
        return [flag == 1 for flag in reply[1]]

    async def _enqueue_on_cluster(self, tasks: list[Envelope], delay_us: int) -> list[bool]:
        """Enqueue where the id index lives in other slots than the queues (Redis Cluster):
        reserve the ids, then admit each queue's tasks with one script."""
        await reserve_ids(self._redis(), self._prefix, self._address, tasks)
        by_queue: dict[str, list[int]] = {}
        for i, task in enumerate(tasks):
            by_queue.setdefault(task.queue, []).append(i)
        stored = [False] * len(tasks)
        for queue, positions in by_queue.items():
            qk = self._keys(queue)
            keys: list[str] = []
            args: list[Any] = [len(positions), "0"]
            for i in positions:
                keys += [qk.pending, qk.task(tasks[i].id)]
                args += _enqueue_args(tasks[i], qk, delay_us)
            for i, flag in zip(positions, await self._run_enqueue(keys, args), strict=True):
                stored[i] = flag
        return stored

    async def _forget_ids(self, deleted: list[bytes]) -> int:
        """After a purge, on Redis Cluster, drop the purged ids from the index; return how
        many tasks were purged."""
        if self._cluster:
            await forget_ids(self._redis(), self._prefix, self._address, deleted)
        return len(deleted)

    # --- claiming --------------------------------------------------------------------------

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        self._check_open()
        limits.check_queue(queue)
        limits.check_worker_id(worker_id)
        limits.check_limit(limit)
        limits.check_lease(lease)
        scripts = self._ready()
        qk = self._keys(queue)
        # The token names the queue, so resolving a claim needs no id -> queue lookup.
        tokens = [f"{queue}/{secrets.token_hex(16)}" for _ in range(limit)]
        reply = await self._run(
            scripts.claim_due, [qk.pending, qk.inflight], [qk.base, _us(lease), *tokens]
        )
        return [
            Claimed(envelope_from_hash(hash_pairs(fields)), token.decode())
            for _, token, fields in reply
        ]

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        self._check_open()
        limits.check_task_id(task_id)
        limits.check_token(token)
        limits.check_lease(lease)
        scripts = self._ready()
        qk = await self._claim_keys(task_id, token)
        reply = await self._run(
            scripts.extend_lease, [qk.inflight], [qk.base, task_id, token, _us(lease)]
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
        if not isinstance(attempt, Attempt):
            raise ValidationError("must be an rdq.spi.Attempt", field="attempt")
        scripts = self._ready()
        qk = await self._claim_keys(task_id, token)
        reply = await self._run(
            scripts.resolve,
            [qk.pending, qk.inflight, qk.dead, qk.succeeded],
            [
                qk.base,
                task_id,
                token,
                status,
                attempt_json(attempt),
                attempt.error_type or "",
                next_at_us,
                qk.wake,
            ],
        )
        await self._check_fenced(reply, task_id)

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        """``complete`` for many claims in one script call (one per queue on Redis Cluster),
        each fenced on its own token; a lost claim's error is returned in its place."""
        self._check_open()
        for item in completions:  # validate every item before changing anything
            if not isinstance(item, Completion):
                raise ValidationError("must be rdq.spi.Completion items", field="completions")
            limits.check_task_id(item.task_id)
            limits.check_token(item.token)
            if not isinstance(item.attempt, Attempt):
                raise ValidationError("must be an rdq.spi.Attempt", field="attempt")
        scripts = self._ready()
        results: list[StaleClaim | NotFound | None] = [None] * len(completions)
        groups: dict[str, list[tuple[int, QueueKeys]]] = {}
        unheld: list[int] = []
        for i, item in enumerate(completions):
            queue = _token_queue(item.token)
            if queue is None:
                unheld.append(i)
            else:  # one call for everything on one server; per queue (slot) on Cluster
                groups.setdefault(queue if self._cluster else "", []).append((i, self._keys(queue)))
        for group in groups.values():
            keys: list[str] = []
            args: list[Any] = [len(group)]
            for i, qk in group:
                item = completions[i]
                keys += [qk.inflight, qk.succeeded]
                args += [
                    qk.base,
                    item.task_id,
                    item.token,
                    attempt_json(item.attempt),
                    item.attempt.error_type or "",
                ]
            reply = await self._run(scripts.complete_many, keys, args)
            for (i, _), outcome in zip(group, reply, strict=True):
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
        queue = _token_queue(token)
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
        scripts = self._ready()
        qk = self._keys(queue)
        after_score, after_id = "", ""
        if page.cursor is not None:
            cursor = DLQCursor.decode(page.cursor, queue, dlq_filter)
            after_score, after_id = str(to_us(cursor.dead_lettered_at)), cursor.id
        low, high, handler, error = _filter_args(dlq_filter)
        want = page.limit + 1
        found: list[Envelope] = []
        while len(found) < want:
            reply = await self._run(
                scripts.dlq_page,
                [qk.dead],
                [
                    qk.base,
                    after_score,
                    after_id,
                    low,
                    high,
                    handler,
                    error,
                    want - len(found),
                    _DLQ_SCAN_BUDGET,
                    "1" if page.include_attempts else "0",
                ],
            )
            entries = reply[-1]
            found += [
                envelope_from_hash(hash_pairs(e), with_attempts=page.include_attempts)
                for e in entries
            ]
            if reply[0] == b"END":
                break
            after_score, after_id = reply[1].decode(), reply[2].decode()
        tasks = found[: page.limit]
        if len(found) <= page.limit or not tasks:
            return tasks, None
        last = tasks[-1]
        if last.dead_lettered_at is None:
            raise StorageError(f"DEAD task {last.id!r} has no dead_lettered_at")
        return tasks, DLQCursor.after(queue, dlq_filter, last.dead_lettered_at, last.id).encode()

    async def get(self, task_id: str) -> Envelope:
        self._check_open()
        limits.check_task_id(task_id)
        queue = await self._queue_of(task_id)
        if queue is None:
            raise NotFound(task_id)
        with translate_errors(self._address):
            fields = await self._redis().hgetall(self._keys(queue).task(task_id))
        if not fields:
            raise NotFound(task_id)  # purged between the two reads
        return envelope_from_hash(cast(dict[bytes, bytes], fields))

    async def redrive(self, queue: str, selector: Selector) -> int:
        self._check_open()
        limits.check_queue(queue)
        limits.check_selector(selector)
        qk = self._keys(queue)
        reply = await self._run(
            self._ready().redrive,
            [qk.pending, qk.dead],
            [qk.base, qk.wake, *_selector_args(selector)],
        )
        return int(reply)

    async def purge(self, queue: str, selector: Selector) -> int:
        self._check_open()
        limits.check_queue(queue)
        limits.check_selector(selector)
        qk = self._keys(queue)
        deleted = await self._run(
            self._ready().purge,
            [qk.dead],
            [qk.base, self._prefix, self._indexed, *_selector_args(selector)],
        )
        return await self._forget_ids(deleted)

    # --- operations ------------------------------------------------------------------------

    async def stats(self, queue: str) -> Stats:
        self._check_open()
        limits.check_queue(queue)
        qk = self._keys(queue)
        reply = await self._run(
            self._ready().stats, [qk.pending, qk.inflight, qk.dead, qk.succeeded], []
        )
        now_us = int(reply[0])
        oldest = reply[5]
        return Stats(
            queue=queue,
            pending=int(reply[1]),
            in_flight=int(reply[2]),
            dlq_depth=int(reply[3]),
            succeeded=int(reply[4]),
            oldest_pending_age=(now_us - int(oldest)) / 1e6 if oldest else None,
            as_of=from_us(now_us),
        )

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        self._check_open()
        limits.check_queue(queue)
        limits.check_aware(older_than, "older_than")
        scripts = self._ready()
        qk = self._keys(queue)
        total = 0
        while True:
            deleted = await self._run(
                scripts.purge_succeeded,
                [qk.succeeded],
                [qk.base, self._prefix, to_us(older_than), _PURGE_BATCH, self._indexed],
            )
            total += await self._forget_ids(deleted)
            if len(deleted) < _PURGE_BATCH:
                return total

    async def wait_due(self, queue: str, timeout: float) -> bool:
        self._check_open()
        limits.check_queue(queue)
        if not isinstance(timeout, int | float) or timeout < 0:
            raise ValidationError("must be a non-negative number of seconds", field="timeout")
        return await self._live().waiters.wait(self._keys(queue), float(timeout))


def _token_queue(token: str) -> str | None:
    """The queue a claim token of this store names (``<queue>/<random>``), or None."""
    queue, _, _ = token.rpartition("/")
    try:
        return limits.check_queue(queue)
    except ValidationError:
        return None


def _enqueue_args(task: Envelope, qk: QueueKeys, delay_us: int) -> list[Any]:
    """The 11 per-task values ``enqueue.lua`` reads."""
    last_error = task.attempts[-1].error_type if task.attempts else None
    return [
        task.queue,
        task.id,
        envelope_body(task),
        "" if task.next_attempt_at is None else str(to_us(task.next_attempt_at)),
        delay_us,
        task.attempt_count,
        task.redrive_count,
        attempts_json(task.attempts),
        task.handler_ref,
        last_error or "",
        qk.wake,
    ]


def _filter_args(dlq_filter: DLQFilter | None) -> tuple[str, str, str, str]:
    """(min score, max score, handler filter, error filter) for the DLQ scripts."""
    f = dlq_filter or DLQFilter()
    low = "-inf" if f.dead_lettered_after is None else str(to_us(f.dead_lettered_after))
    high = "+inf" if f.dead_lettered_before is None else f"({to_us(f.dead_lettered_before)}"
    handler = "" if f.handler_ref is None else "=" + f.handler_ref
    error = "" if f.error_type is None else "=" + f.error_type
    return low, high, handler, error


def _selector_args(selector: Selector) -> list[str]:
    if selector.ids is not None:
        return ["ids", *selector.ids]
    return ["filter", *_filter_args(selector.filter)]
