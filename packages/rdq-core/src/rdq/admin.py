"""The DLQ admin API: list, inspect, redrive and purge dead-lettered tasks, with audit records.

:class:`DLQAdmin` wraps a :class:`~rdq.spi.Storage`. It is what the HTTP API, the web UI and
the ``rdq dlq`` command use, so every redrive and purge, whoever asks for it, is counted in
the metrics and leaves an :class:`~rdq.audit.AuditRecord`.

Stores without the ``filter_pushdown`` capability may ignore DLQ filters. For them the admin
filters pages itself with :meth:`DLQFilter.matches` (listing), and turns a redrive or purge
by filter into explicit id sets by paging through the whole DLQ first (SPEC §3).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime

import msgspec

from rdq import audit
from rdq.audit import Action, AuditRecord, AuditSink
from rdq.errors import NotFound, StaleCursor, ValidationError
from rdq.spi import DLQFilter, Envelope, Page, Selector, Status, Storage, limits

__all__ = ["DLQAdmin", "ProgressCallback"]

ProgressCallback = Callable[[int, int | None], None]
"""Called as ``progress(done, total)`` while a redrive or purge runs (``total`` may be None)."""

_SCAN_PAGE = limits.MAX_LIMIT
"""Tasks per storage page when the admin scans the DLQ itself."""
_SCAN_BUDGET = 20
"""Storage pages one filtered listing may scan before it returns a short page and a cursor."""
_CHUNK = 500
"""Ids per storage call when a redrive or purge runs by explicit ids."""


class DLQAdmin:
    """DLQ operations over ``storage`` that log and record every redrive and purge.

    ``sinks`` receive an :class:`AuditRecord` for each redrive and purge (dry runs change
    nothing and are not recorded)."""

    def __init__(self, storage: Storage, *, sinks: Sequence[AuditSink] = ()) -> None:
        self.storage = storage
        self.sinks: list[AuditSink] = list(sinks)

    @property
    def filters_in_storage(self) -> bool:
        """True when the store evaluates DLQ filters itself (``filter_pushdown``)."""
        return self.storage.capabilities().filter_pushdown

    # --- reading ---------------------------------------------------------------------------

    async def get(self, task_id: str) -> Envelope:
        """The task with every attempt. Raises ``NotFound``."""
        return await self.storage.get(limits.check_task_id(task_id))

    async def list_dlq(
        self, queue: str, dlq_filter: DLQFilter | None = None, page: Page | None = None
    ) -> tuple[list[Envelope], str | None]:
        """One page of the DLQ of ``queue`` (ordered by dead-lettering time, then id) and the
        cursor of the next page, or None on the last page.

        On a store without ``filter_pushdown`` a filtered page may hold fewer than
        ``page.limit`` tasks while a cursor is still returned (the scan of one call is
        bounded); keep paging until the cursor is None. Raises ``StaleCursor`` for a cursor
        from another queue or filter, ``ValidationError`` for bad input."""
        page = page or Page()
        limits.check_queue(queue)
        limits.check_page(page)
        if dlq_filter is not None:
            limits.check_filter(dlq_filter)
        if dlq_filter is None or self.filters_in_storage:
            return await self.storage.dlq_list(queue, dlq_filter, page)
        return await self._list_filtered(queue, dlq_filter, page)

    async def count(self, queue: str, selector: Selector) -> int:
        """How many DEAD tasks of ``queue`` the selector names now (what a dry run reports)."""
        limits.check_queue(queue)
        limits.check_selector(selector)
        if selector.ids is not None:
            return len(await self._dead_ids(queue, selector.ids))
        total = 0
        async for batch in self._scan(queue, selector.filter):
            total += len(batch)
        return total

    # --- acting ----------------------------------------------------------------------------

    async def redrive(
        self,
        queue: str,
        selector: Selector,
        *,
        actor: str,
        reason: str | None = None,
        dry_run: bool = False,
        progress: ProgressCallback | None = None,
    ) -> int:
        """Return the selected DEAD tasks of ``queue`` to PENDING; return how many.

        ``dry_run`` only counts them. Otherwise an audit record naming ``actor`` is written,
        also when the operation fails part-way (with the count done so far and the error)."""
        return await self._act("redrive", queue, selector, actor, reason, dry_run, progress)

    async def purge(
        self,
        queue: str,
        selector: Selector,
        *,
        actor: str,
        reason: str | None = None,
        dry_run: bool = False,
        progress: ProgressCallback | None = None,
    ) -> int:
        """Delete the selected DEAD tasks of ``queue``; return how many. Audited like
        :meth:`redrive`."""
        return await self._act("purge", queue, selector, actor, reason, dry_run, progress)

    async def _act(
        self,
        action: Action,
        queue: str,
        selector: Selector,
        actor: str,
        reason: str | None,
        dry_run: bool,
        progress: ProgressCallback | None,
    ) -> int:
        limits.check_queue(queue)
        limits.check_selector(selector)
        if not isinstance(actor, str) or not actor:
            raise ValidationError("must be a non-empty string", field="actor")
        if reason is not None and len(reason) > 1000:
            raise ValidationError("longer than 1000 characters", field="reason")
        if dry_run:
            return await self.count(queue, selector)
        operation = self.storage.redrive if action == "redrive" else self.storage.purge
        done = 0
        error: str | None = None
        try:
            if selector.filter is not None and self.filters_in_storage:
                done = await operation(queue, selector)
                _report(progress, done, done)
            else:
                ids = list(selector.ids) if selector.ids is not None else None
                if ids is None:
                    ids = [
                        t.id async for batch in self._scan(queue, selector.filter) for t in batch
                    ]
                _report(progress, 0, len(ids))
                for start in range(0, len(ids), _CHUNK):
                    chunk = ids[start : start + _CHUNK]
                    done += await operation(queue, Selector(ids=chunk))
                    _report(progress, min(start + _CHUNK, len(ids)), len(ids))
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            _count_metric(action, queue, done)
            record = AuditRecord(
                actor=actor,
                action=action,
                queue=queue,
                selector=audit.selector_to_builtins(selector),
                count=done,
                reason=reason,
                time=audit.now_utc(),
                error=error,
            )
            await audit.emit(record, self.sinks)
        return done

    # --- helpers ---------------------------------------------------------------------------

    async def _dead_ids(self, queue: str, ids: Sequence[str]) -> list[str]:
        found: list[str] = []
        for task_id in dict.fromkeys(ids):
            try:
                task = await self.storage.get(task_id)
            except NotFound:
                continue
            if task.queue == queue and task.status == Status.DEAD:
                found.append(task_id)
        return found

    async def _matching_ids(self, queue: str, dlq_filter: DLQFilter | None) -> list[str]:
        return [task.id async for batch in self._scan(queue, dlq_filter) for task in batch]

    async def _scan(
        self, queue: str, dlq_filter: DLQFilter | None
    ) -> AsyncIterator[list[Envelope]]:
        """Yield the DLQ of ``queue`` page by page, filtered (by the store or here)."""
        pushdown = self.filters_in_storage
        store_filter = dlq_filter if pushdown else None
        need_attempts = (
            not pushdown and dlq_filter is not None and dlq_filter.error_type is not None
        )
        cursor: str | None = None
        while True:
            page = Page(limit=_SCAN_PAGE, cursor=cursor, include_attempts=need_attempts)
            tasks, cursor = await self.storage.dlq_list(queue, store_filter, page)
            if dlq_filter is not None and not pushdown:
                tasks = [t for t in tasks if dlq_filter.matches(t)]
            if tasks:
                yield tasks
            if cursor is None:
                return

    async def _list_filtered(
        self, queue: str, dlq_filter: DLQFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        position = _FallbackCursor.decode(page.cursor, queue, dlq_filter)
        store_cursor = position.store_cursor if position else None
        after: tuple[datetime, str] | None = None
        if position is not None and position.after_at is not None and position.after_id:
            after = (position.after_at, position.after_id)
        out: list[Envelope] = []
        for _ in range(_SCAN_BUDGET):
            request = Page(limit=_SCAN_PAGE, cursor=store_cursor, include_attempts=True)
            tasks, next_store_cursor = await self.storage.dlq_list(queue, None, request)
            for task in tasks:
                if after is not None and _key_le(task, after):
                    continue
                if not dlq_filter.matches(task):
                    continue
                if len(out) == page.limit:
                    last = out[-1]
                    return _strip(out, page), _FallbackCursor.after(
                        queue, dlq_filter, store_cursor, last
                    )
                out.append(task)
            if next_store_cursor is None:
                return _strip(out, page), None
            store_cursor, after = next_store_cursor, None
        if not out:
            # Nothing matched within the scan budget: continue from the next store page.
            return [], _FallbackCursor(
                _VERSION, _scope(queue, dlq_filter), store_cursor, None, None
            ).encode()
        return _strip(out, page), _FallbackCursor.after(queue, dlq_filter, store_cursor, out[-1])


def _report(progress: ProgressCallback | None, done: int, total: int | None) -> None:
    if progress is not None:
        progress(done, total)


def _strip(tasks: list[Envelope], page: Page) -> list[Envelope]:
    if not page.include_attempts:
        for task in tasks:
            task.attempts = []
    return tasks


def _key_le(task: Envelope, after: tuple[datetime, str]) -> bool:
    """True if ``task`` sorts at or before ``after`` in DLQ order (dead_lettered_at, id)."""
    at = task.dead_lettered_at
    if at is None:  # not a DLQ task: a store bug, but never return it twice
        return True
    return (at, task.id) <= after


def _count_metric(action: Action, queue: str, count: int) -> None:
    if count <= 0:
        return
    try:
        from rdq import metrics  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return
    counter = getattr(metrics, "REDRIVEN" if action == "redrive" else "PURGED", None)
    if counter is not None:
        counter.labels(queue=queue).inc(count)


_VERSION = 1


class _FallbackCursor(msgspec.Struct, frozen=True, array_like=True):
    """Where a listing filtered by the admin stopped: the store cursor of the storage page it
    stopped in, and the last task returned from that page (``None`` when the page starts
    fresh). Opaque to callers; bound to its queue and filter."""

    version: int
    scope: str
    store_cursor: str | None
    after_at: datetime | None
    after_id: str | None

    @classmethod
    def after(
        cls, queue: str, dlq_filter: DLQFilter, store_cursor: str | None, last: Envelope
    ) -> str:
        scope = _scope(queue, dlq_filter)
        return cls(_VERSION, scope, store_cursor, last.dead_lettered_at, last.id).encode()

    def encode(self) -> str:
        raw = msgspec.json.encode(self)
        return "f" + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, token: str | None, queue: str, dlq_filter: DLQFilter) -> _FallbackCursor | None:
        if token is None:
            return None
        if not token.startswith("f"):
            raise StaleCursor("malformed cursor")
        body = token[1:]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            cursor = msgspec.json.decode(raw, type=cls)
        except (binascii.Error, ValueError, msgspec.DecodeError):
            raise StaleCursor("malformed cursor") from None
        if cursor.version != _VERSION or cursor.scope != _scope(queue, dlq_filter):
            raise StaleCursor("cursor belongs to another queue or filter")
        if (cursor.after_id is None) != (cursor.after_at is None):
            raise StaleCursor("malformed cursor")
        if cursor.after_at is not None and cursor.after_at.tzinfo is None:
            raise StaleCursor("malformed cursor")
        return cursor


def _scope(queue: str, dlq_filter: DLQFilter) -> str:
    digest = hashlib.blake2b(digest_size=8, person=b"rdq-admin")
    digest.update(queue.encode())
    digest.update(b"\x00")
    digest.update(msgspec.json.encode(dlq_filter))
    return digest.hexdigest()
