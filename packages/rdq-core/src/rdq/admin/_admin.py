"""TaskAdmin: find, inspect, redrive, purge and cancel tasks, with an audit trail.

It wraps a :class:`~rdq.spi.Storage` and is what the HTTP API, the web UI and the ``rdq``
operator commands use, so every action, whoever asks for it, is validated the same way,
counted in the metrics and audited.

Stores without the ``filter_pushdown`` capability may ignore filters. For them the admin
filters pages itself (listing), and turns a redrive, purge or cancel by filter into explicit
id sets by paging through the selection first (see ``rdq.spi.Storage.redrive``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

from rdq.admin._acting import Acting, ProgressCallback
from rdq.admin._fallback import SCAN_PAGE, list_filtered
from rdq.admin._flow_admin import FlowAdmin
from rdq.admin._imports import ImportReport, import_dead
from rdq.admin._names import KnownQueues, Names, known_names
from rdq.admin._outlook import Outlook, outlooks
from rdq.admin._paging import bounded_page
from rdq.admin._preview import Preview, dlq_hint, sort_ids, task_hint
from rdq.admin._scan import ids_in, scan_dlq, scan_tasks
from rdq.admin._selectors import TaskSelector, check_task_selector
from rdq.app import App
from rdq.audit import (
    Action,
    AuditSink,
    check_action,
)
from rdq.blobs import Blobs
from rdq.logging import get_logger
from rdq.retention import Archive
from rdq.spi import (
    AuditEntry,
    AuditFilter,
    DLQFilter,
    DLQGroup,
    Envelope,
    Page,
    Selector,
    Stats,
    Status,
    Storage,
    TaskFilter,
    bounds,
    status_time,
    task_scope,
)

__all__ = ["DLQAdmin", "ProgressCallback", "TaskAdmin"]


_log = get_logger("rdq.admin")


class TaskAdmin(Acting, FlowAdmin):
    """Operator operations over ``storage``; every redrive, purge and cancel is audited, and
    is an OpenTelemetry span when ``rdq-core[otel]`` is installed (see :meth:`redrive`).

    The audit record of an action goes to the store's audit trail (``append_audit``), to the
    ``rdq.audit`` logger, and to every sink in ``sinks`` (dry runs change nothing and are not
    recorded)."""

    def __init__(
        self,
        storage: Storage,
        *,
        sinks: Sequence[AuditSink] = (),
        app: App | None = None,
        declared: Sequence[str] = (),
        archive: Archive | None = None,
        blobs: Blobs | None = None,
    ) -> None:
        """``app`` and ``declared`` (queue names) are what the surface's application knows
        beside the store (a node's ``--app`` and ``--queue``): names they declare are known
        to :meth:`check_names`. With an ``archive``, a purge writes every task it deletes to
        it first (see :mod:`rdq.retention`). ``blobs``: where payloads kept by reference are
        (see :mod:`rdq.blobs`): :meth:`get`, :meth:`read_payloads`, the archive of a purge
        and an import read and write them there; without it a task is given as stored."""
        self.storage = storage
        self.sinks: list[AuditSink] = list(sinks)
        self.app = app
        self.declared = list(declared)
        self.archive = archive
        self.blobs = blobs
        self.known = KnownQueues()

    # --- reading ---------------------------------------------------------------------------

    async def get(self, task_id: str, *, payload: bool = True) -> Envelope:
        """The task with every attempt, its payload read back from the blob store when it is
        kept by reference (unless ``payload`` is false). Raises ``NotFound``,
        ``ValidationError``."""
        task = await self.storage.get(bounds.check_task_id(task_id))
        if payload:
            (task,) = await self.read_payloads([task])
        return task

    async def read_payloads(self, tasks: Sequence[Envelope]) -> list[Envelope]:
        """``tasks`` with the payloads kept by reference read back (see
        :meth:`rdq.blobs.Blobs.readable`: a missing blob leaves a task as stored)."""
        if self.blobs is None:
            return list(tasks)
        return await self.blobs.readable(tasks)

    async def stats(self, queue: str) -> Stats:
        """The counts of ``queue``. All zero for a queue nothing knows is ``UnknownName``
        (see :meth:`known_unless_found`)."""
        stats = await self.storage.stats(bounds.check_queue(queue))
        if not (stats.pending or stats.in_flight or stats.dlq_depth or stats.succeeded):
            await self.known_unless_found(queue, found=stats.cancelled > 0)
        return stats

    async def list_queues(self) -> list[Stats]:
        """Every queue holding a task, with its stats, by name. Raises
        ``NotImplementedError`` from a store that cannot list its queues yet."""
        return await self.storage.list_queues()

    async def list_tasks(
        self,
        queue: str,
        task_filter: TaskFilter,
        page: Page | None = None,
        *,
        max_bytes: int | None = None,
    ) -> tuple[list[Envelope], str | None]:
        """One page of the tasks of ``queue`` in ``task_filter.status`` (by status time, then
        id) and the cursor of the next page, None on the last.

        A page may hold fewer than ``page.limit`` tasks while a cursor is returned (a store
        without ``filter_pushdown``, or a page stopped at ``max_bytes``): keep paging until
        the cursor is None. Raises ``StaleCursor`` for a cursor from another queue or filter,
        ``ValidationError`` for bad input."""
        page = page or Page()
        bounds.check_queue(queue)
        bounds.check_page(page)
        bounds.check_task_filter(task_filter)

        async def fetch(limit: int, cursor: str | None) -> tuple[list[Envelope], str | None]:
            chunk = Page(limit=limit, cursor=cursor, include_attempts=page.include_attempts)
            if self.filters_in_storage or task_filter == TaskFilter(status=task_filter.status):
                return await self.storage.list_tasks(queue, task_filter, chunk)
            return await self._list_tasks_filtered(queue, task_filter, chunk)

        tasks, cursor = await _page_of(fetch, page, max_bytes)
        await self.known_unless_found(queue, found=bool(tasks) or page.cursor is not None)
        return tasks, cursor

    async def list_dlq(
        self,
        queue: str,
        dlq_filter: DLQFilter | None = None,
        page: Page | None = None,
        *,
        max_bytes: int | None = None,
    ) -> tuple[list[Envelope], str | None]:
        """One page of the DLQ of ``queue`` (by dead-lettering time, then id) and the cursor
        of the next page, or None on the last page. Short pages as in :meth:`list_tasks`."""
        page = page or Page()
        bounds.check_queue(queue)
        bounds.check_page(page)
        if dlq_filter is not None:
            bounds.check_filter(dlq_filter)

        async def fetch(limit: int, cursor: str | None) -> tuple[list[Envelope], str | None]:
            chunk = Page(limit=limit, cursor=cursor, include_attempts=page.include_attempts)
            if dlq_filter is None or self.filters_in_storage:
                return await self.storage.dlq_list(queue, dlq_filter, chunk)
            return await self._list_dlq_filtered(queue, dlq_filter, chunk)

        tasks, cursor = await _page_of(fetch, page, max_bytes)
        await self.known_unless_found(queue, found=bool(tasks) or page.cursor is not None)
        return tasks, cursor

    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        """The DLQ of ``queue`` grouped by handler and last error type, largest first."""
        groups = await self.storage.dlq_groups(bounds.check_queue(queue))
        await self.known_unless_found(queue, found=bool(groups))
        return groups

    async def count(self, queue: str, selector: Selector, *, action: Action = "redrive") -> int:
        """How many tasks of ``queue`` a redrive (DEAD ones) or purge (DEAD ones, and by ids
        CANCELLED ones too) of ``selector`` would act on now: what a dry run reports."""
        bounds.check_queue(queue)
        bounds.check_selector(selector)
        if selector.ids is not None:
            wanted = (Status.DEAD, Status.CANCELLED) if action == "purge" else (Status.DEAD,)
            return len(await ids_in(self.storage, queue, selector.ids, wanted))
        return sum(
            [
                len(batch)
                async for batch in scan_dlq(
                    self.storage, self.filters_in_storage, queue, selector.filter
                )
            ]
        )

    async def count_cancel(self, queue: str, selector: TaskSelector) -> int:
        """How many tasks of ``queue`` a cancel of ``selector`` would cancel now."""
        bounds.check_queue(queue)
        check_task_selector(selector)
        if selector.ids is not None:
            return len(
                await ids_in(self.storage, queue, selector.ids, (Status.PENDING, Status.IN_FLIGHT))
            )
        task_filter = selector.filter
        if task_filter is None:  # unreachable: a TaskSelector holds ids or a filter
            return 0
        return sum(
            [
                len(batch)
                async for batch in scan_tasks(
                    self.storage, self.filters_in_storage, queue, task_filter
                )
            ]
        )

    async def list_audit(
        self, audit_filter: AuditFilter | None = None, page: Page | None = None
    ) -> tuple[list[AuditEntry], str | None]:
        """One page of the store's audit trail, newest first, and the next page's cursor."""
        page = page or Page()
        bounds.check_page(page)
        if audit_filter is not None:
            bounds.check_audit_filter(audit_filter)
        return await self.storage.list_audit(audit_filter, page)

    async def outlook(self, tasks: Sequence[Envelope]) -> list[Outlook]:
        """What holds each of ``tasks`` and what happens next (see
        :mod:`rdq.admin._outlook`)."""
        return await outlooks(self.storage, tasks, app=self.app)

    # --- before acting ---------------------------------------------------------------------

    async def names(self, queue: str | None = None) -> Names:
        """The queues known on the store (and to the surface's application), and, for
        ``queue``, its known handlers and dependencies (see :mod:`rdq.admin._names`)."""
        return await known_names(self.storage, queue, app=self.app, declared=self.declared)

    async def check_names(self, queue: str, key: str | None = None) -> None:
        """Raise ``UnknownName`` (with the closest known name) unless ``queue`` — and the
        handler or dependency ``key`` names in it — is known: an operator's typo is refused
        before anything is written. Surfaces skip this when the operator forces a name meant
        for the future."""
        bounds.check_queue(queue)
        names = await self.names(queue if key is not None else None)
        names.check_queue(queue)
        if key is not None:
            names.check_key(queue, key)

    async def known_unless_found(self, queue: str, *, found: bool) -> None:
        """After a read of ``queue`` that ``found`` nothing, ``UnknownName`` unless something
        knows the queue: an empty answer about a typo (``rdq dlq list reprots``) would say
        "nothing is wrong" of a queue nobody serves. Costs nothing when the read found
        something, and the names are looked up once for the reads of ``KNOWN_FOR`` seconds
        (:class:`~rdq.admin._names.KnownQueues`); a known queue with nothing in it answers
        empty as before."""
        if found:
            self.known.saw(queue)
        else:
            await self.known.check(queue, self.names)

    async def preview(
        self, action: Action, queue: str, selector: Selector | TaskSelector
    ) -> Preview:
        """What ``action`` would act on now: the count, the named ids it would skip (with
        why) and, when a filter matches nothing, a hint of what is close to it."""
        bounds.check_queue(queue)
        if isinstance(selector, TaskSelector):
            check_task_selector(selector)
        else:
            bounds.check_selector(selector)
        if selector.ids is not None:
            now = await self.storage.now() if action == "retry_now" else None
            taken, skipped = await sort_ids(self.storage, action, queue, selector.ids, now)
            return Preview(count=len(taken), skipped=skipped)
        if isinstance(selector, TaskSelector):
            count = (
                await self.count_retry_now(queue, selector)
                if action == "retry_now"
                else await self.count_cancel(queue, selector)
            )
        else:
            count = await self.count(queue, selector, action=action)
        if count:
            return Preview(count=count)
        return Preview(count=0, hint=await self._hint(queue, selector))

    async def _hint(self, queue: str, selector: Selector | TaskSelector) -> str:
        if isinstance(selector, Selector):
            return dlq_hint(queue, await self.storage.dlq_groups(queue), selector.filter)
        chosen = selector.filter or TaskFilter(status=Status.PENDING)
        stats = await self.storage.stats(queue)
        in_status = {Status.PENDING: stats.pending, Status.IN_FLIGHT: stats.in_flight}
        names = await self.names(queue)
        return task_hint(queue, chosen, sorted(names.handlers), in_status.get(chosen.status))

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
        also when the operation fails part-way (with the count done so far and the error; when
        the call that failed may have been applied anyway, the error says the count is
        unknown). A destination that cannot take the record never fails the action: it is
        retried, then logged and counted (``rdq_audit_failures``).

        With OpenTelemetry, the action (dry runs too) is a span ``rdq redrive`` (``rdq purge``,
        ``rdq cancel``) with attributes ``rdq.queue``, ``rdq.action``, ``rdq.selector``
        (``ids`` or ``filter``), ``rdq.dry_run``, ``rdq.actor``, then ``rdq.count`` (done so
        far, on failure too) and ``rdq.outcome`` (``done`` or ``failed``, with
        ``rdq.error_type`` and the span's status ERROR)."""
        check_action(queue, actor, reason)
        bounds.check_selector(selector)
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
        """Delete the selected DEAD tasks of ``queue`` (by ids, CANCELLED ones too); return
        how many. Audited like :meth:`redrive`."""
        check_action(queue, actor, reason)
        bounds.check_selector(selector)
        return await self._act("purge", queue, selector, actor, reason, dry_run, progress)

    async def cancel(
        self,
        queue: str,
        selector: TaskSelector,
        *,
        actor: str,
        reason: str | None = None,
        dry_run: bool = False,
        progress: ProgressCallback | None = None,
    ) -> int:
        """Cancel the selected PENDING or IN_FLIGHT tasks of ``queue``; return how many.

        A cancelled task never runs again; an IN_FLIGHT one's claim is revoked, so its worker
        abandons it at its next heartbeat or resolution. Audited like :meth:`redrive`."""
        check_action(queue, actor, reason)
        check_task_selector(selector)
        return await self._act("cancel", queue, selector, actor, reason, dry_run, progress)

    # --- putting tasks back ---------------------------------------------------------------

    async def import_dead(
        self,
        tasks: Iterable[Envelope],
        *,
        actor: str,
        queue: str | None = None,
        reason: str | None = None,
        report: ImportReport | None = None,
    ) -> ImportReport:
        """Put DEAD tasks (from an archive or an export) back into their queue's DLQ, ids,
        attempts and times kept, idempotently; each queue that gained tasks is audited
        (``import``). See :mod:`rdq.admin._imports`."""
        return await import_dead(
            self.storage,
            tasks,
            actor=actor,
            queue=queue,
            reason=reason,
            sinks=self.sinks,
            report=report,
            blobs=self.blobs,
        )

    # --- helpers -------------------------------------------------------------------------

    def _dead(self, queue: str, dlq_filter: DLQFilter | None) -> AsyncIterator[list[Envelope]]:
        return scan_dlq(self.storage, self.filters_in_storage, queue, dlq_filter)

    def _selected(self, queue: str, task_filter: TaskFilter) -> AsyncIterator[list[Envelope]]:
        return scan_tasks(self.storage, self.filters_in_storage, queue, task_filter)

    async def _list_dlq_filtered(
        self, queue: str, dlq_filter: DLQFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        async def fetch(cursor: str | None) -> tuple[list[Envelope], str | None]:
            request = Page(limit=SCAN_PAGE, cursor=cursor, include_attempts=True)
            return await self.storage.dlq_list(queue, None, request)

        scope = "dlq:" + task_scope(queue, _as_task_filter(dlq_filter))
        return await list_filtered(
            fetch, scope, dlq_filter.matches, lambda t: t.dead_lettered_at, page
        )

    async def _list_tasks_filtered(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        store_filter = TaskFilter(status=task_filter.status)

        async def fetch(cursor: str | None) -> tuple[list[Envelope], str | None]:
            request = Page(limit=SCAN_PAGE, cursor=cursor, include_attempts=True)
            return await self.storage.list_tasks(queue, store_filter, request)

        scope = task_scope(queue, task_filter)
        return await list_filtered(fetch, scope, task_filter.matches, status_time, page)


DLQAdmin = TaskAdmin
"""The name this class had when it only handled the DLQ."""


async def _page_of(
    fetch: Callable[[int, str | None], Any], page: Page, max_bytes: int | None
) -> tuple[list[Envelope], str | None]:
    if max_bytes is None:
        result: tuple[list[Envelope], str | None] = await fetch(page.limit, page.cursor)
        return result
    return await bounded_page(fetch, page.limit, page.cursor, max_bytes)


def _as_task_filter(dlq_filter: DLQFilter) -> TaskFilter:
    return TaskFilter(
        status=Status.DEAD,
        error_type=dlq_filter.error_type,
        handler_ref=dlq_filter.handler_ref,
        after=dlq_filter.dead_lettered_after,
        before=dlq_filter.dead_lettered_before,
    )
