"""The acting half of :class:`~rdq.admin.TaskAdmin`: redrive, purge and cancel of a selection,
run to the end of each storage call (:mod:`rdq.admin._finish`), audited (with what the
selection matched), counted and traced, and answered as an
:class:`~rdq.admin._reports.ActionReport` — matched, done, already gone; a purge with an
archive writes what it deletes there first."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec

from rdq.admin._finish import to_the_end
from rdq.admin._reports import ActionReport, purge_archived, tasks_in
from rdq.admin._scan import ids_in, scan_dlq
from rdq.admin._selectors import TaskSelector, check_task_selector
from rdq.audit import (
    COUNT_UNKNOWN,
    Action,
    AuditSink,
    check_action,
    record_action,
)
from rdq.blobs import Blobs
from rdq.errors import StorageUnavailable
from rdq.logging import get_logger
from rdq.retention import Archive
from rdq.spi import Envelope, Selector, Status, Storage, TaskFilter, bounds
from rdq.tracing import span

__all__ = ["CHUNK", "Acting", "ProgressCallback"]

ProgressCallback = Callable[[int, int | None], None]
"""Called as ``progress(done, total)`` while an action runs (``total`` may be None)."""

CHUNK = 500
"""Ids per storage call when an action runs by explicit ids."""
_log = get_logger("rdq.admin")


class Acting:
    """Redrive, purge and cancel over ``self.storage`` (see the module docstring)."""

    storage: Storage
    sinks: list[AuditSink]
    archive: Archive | None
    blobs: Blobs | None

    @property
    def filters_in_storage(self) -> bool:
        """True when the store evaluates filters itself (``filter_pushdown``)."""
        return self.storage.capabilities().filter_pushdown

    async def count(self, queue: str, selector: Selector, *, action: Action = "redrive") -> int:
        raise NotImplementedError  # TaskAdmin's

    async def count_cancel(self, queue: str, selector: TaskSelector) -> int:
        raise NotImplementedError  # TaskAdmin's

    def _selected(self, queue: str, task_filter: TaskFilter) -> AsyncIterator[list[Envelope]]:
        raise NotImplementedError  # TaskAdmin's

    async def _act(
        self,
        action: Action,
        queue: str,
        selector: Selector | TaskSelector,
        actor: str,
        reason: str | None,
        dry_run: bool,
        progress: ProgressCallback | None,
    ) -> int:
        report = await self._report(action, queue, selector, actor, reason, dry_run, progress)
        return report.done

    async def _report(
        self,
        action: Action,
        queue: str,
        selector: Selector | TaskSelector,
        actor: str,
        reason: str | None,
        dry_run: bool,
        progress: ProgressCallback | None,
    ) -> ActionReport:
        """Run (or, for a dry run, count) a validated action inside its span."""
        attributes = {
            "rdq.queue": queue,
            "rdq.action": action,
            "rdq.selector": "ids" if selector.ids is not None else "filter",
            "rdq.dry_run": dry_run,
            "rdq.actor": actor,
        }
        with span(f"rdq {action}", attributes) as traced:
            try:
                if not dry_run:
                    report = await self._run(
                        action, queue, selector, actor, reason, progress, traced
                    )
                elif isinstance(selector, TaskSelector):
                    count = await self.count_cancel(queue, selector)
                    report = ActionReport(matched=count, done=count)
                else:
                    count = await self.count(queue, selector, action=action)
                    report = ActionReport(matched=count, done=count)
            except BaseException as exc:
                if traced is not None:
                    traced.set_attribute("rdq.outcome", "failed")
                    traced.set_attribute("rdq.error_type", type(exc).__name__)
                raise
            if traced is not None:
                traced.set_attribute("rdq.count", report.done)
                traced.set_attribute("rdq.matched", report.matched)
                traced.set_attribute("rdq.outcome", "done")
            return report

    async def act(
        self,
        action: Action,
        queue: str,
        selector: Selector | TaskSelector,
        *,
        actor: str,
        reason: str | None = None,
        dry_run: bool = False,
        progress: ProgressCallback | None = None,
    ) -> ActionReport:
        """:meth:`redrive`, :meth:`purge` or :meth:`cancel` (``action``), answering what it
        came to: how many the selection matched when it began, how many it did, and how many
        were already gone when it reached them (see :class:`ActionReport`); a purge with an
        archive also says how many it archived, and where."""
        check_action(queue, actor, reason)
        if action == "cancel":
            check_task_selector(selector)
        else:
            bounds.check_selector(selector)
        return await self._report(action, queue, selector, actor, reason, dry_run, progress)

    async def _run(
        self,
        action: Action,
        queue: str,
        selector: Selector | TaskSelector,
        actor: str,
        reason: str | None,
        progress: ProgressCallback | None,
        traced: Any = None,
    ) -> ActionReport:
        report = ActionReport(matched=0, done=0)
        error: str | None = None
        in_doubt = False  # a storage call that changes tasks is under way
        try:
            if action == "purge" and self.archive is not None and isinstance(selector, Selector):
                in_doubt = True
                report = await self._purge_archived(queue, selector, progress)
                return report
            if isinstance(selector, Selector) and selector.filter is not None:
                if self.filters_in_storage:
                    matched = await self.count(queue, selector, action=action)
                    operation = self.storage.redrive if action == "redrive" else self.storage.purge
                    in_doubt = True
                    done, stopped = await to_the_end(operation(queue, selector))
                    in_doubt = False
                    report = ActionReport(matched=max(matched, done), done=done)
                    _progress(progress, done, done)
                    if stopped:
                        raise asyncio.CancelledError
                    return report
                ids = [
                    t.id
                    async for page in scan_dlq(
                        self.storage, self.filters_in_storage, queue, selector.filter
                    )
                    for t in page
                ]
                report = ActionReport(matched=len(ids), done=0)
            elif isinstance(selector, TaskSelector) and selector.filter is not None:
                scan = self._selected(queue, selector.filter)
                ids = [t.id async for page in scan for t in page]
                report = ActionReport(matched=len(ids), done=0)
            else:
                ids = list(dict.fromkeys(selector.ids or []))
                wanted = _ACTED_ON[action]
                matched = len(await ids_in(self.storage, queue, ids, wanted))
                report = ActionReport(matched=matched, done=0)
            _progress(progress, 0, len(ids))
            for start in range(0, len(ids), CHUNK):
                chunk = ids[start : start + CHUNK]
                in_doubt = True
                applied, stopped = await to_the_end(self._apply(action, queue, chunk))
                report = msgspec.structs.replace(report, done=report.done + applied)
                in_doubt = False
                _progress(progress, min(start + CHUNK, len(ids)), len(ids))
                if stopped:
                    raise asyncio.CancelledError
            return report
        except asyncio.CancelledError:
            error = "interrupted: stopped before the rest" if not in_doubt else None
            if in_doubt:
                error = f"interrupted; {COUNT_UNKNOWN} ({report.done} known done before it)"
            raise
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            if in_doubt and _may_have_applied(exc):
                error += f"; {COUNT_UNKNOWN} ({report.done} known done before it)"
            raise
        finally:
            done = report.done
            _count_metric(action, queue, done)
            if traced is not None:
                traced.set_attribute("rdq.count", done)
            if report.where:
                _log.debug(
                    "purged tasks archived",
                    queue=queue,
                    archived=report.archived,
                    archive=report.where,
                )
            await record_action(
                self.storage, self.sinks, action, queue, selector, actor, reason, done, error
            )

    async def _purge_archived(
        self, queue: str, selector: Selector, progress: ProgressCallback | None
    ) -> ActionReport:
        """A purge whose tasks are written to the archive, page by page, before they go."""
        archive = self.archive
        if archive is None:  # unreachable: the caller checked
            raise RuntimeError("no archive")

        async def pages() -> AsyncIterator[list[Envelope]]:
            if selector.ids is not None:
                found = await tasks_in(self.storage, queue, selector.ids, _ACTED_ON["purge"])
                for start in range(0, len(found), CHUNK):
                    yield found[start : start + CHUNK]
                return
            async for page in scan_dlq(
                self.storage, self.filters_in_storage, queue, selector.filter, attempts=True
            ):
                yield page

        def advance(done: int, matched: int) -> None:
            _progress(progress, done, None)

        return await purge_archived(
            self.storage, archive, queue, pages(), advance, blobs=self.blobs
        )

    async def _apply(self, action: Action, queue: str, ids: list[str]) -> int:
        if action == "cancel":
            return await self.storage.cancel(queue, ids)
        operation = self.storage.redrive if action == "redrive" else self.storage.purge
        return await operation(queue, Selector(ids=ids))


def _may_have_applied(exc: BaseException) -> bool:
    """True if a storage call that raised ``exc`` may still have been applied: it timed out,
    lost its connection or was cancelled, rather than being refused."""
    return isinstance(exc, StorageUnavailable | TimeoutError | asyncio.CancelledError)


def _progress(progress: ProgressCallback | None, done: int, total: int | None) -> None:
    if progress is not None:
        progress(done, total)


_ACTED_ON: dict[str, tuple[Status, ...]] = {
    "redrive": (Status.DEAD,),
    "purge": (Status.DEAD, Status.CANCELLED),
    "cancel": (Status.PENDING, Status.IN_FLIGHT),
}
"""The statuses a task named by id must be in for each action to act on it."""


def _count_metric(action: Action, queue: str, count: int) -> None:
    if count <= 0:
        return
    from rdq import metrics

    name = {"redrive": "REDRIVEN", "purge": "PURGED", "cancel": "CANCELLED"}[action]
    counter = getattr(metrics, name, None)
    if counter is not None:
        counter.labels(queue=queue).inc(count)
