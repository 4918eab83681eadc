"""The retention step: finished tasks leave the store only once they are in the archive.

:func:`archive_then_expire` reads a page of the finished tasks to remove (with every attempt),
writes the page to the archive — which returns only once it is durable — and then has the
store expire exactly those tasks (``Storage.expire_tasks``: each only while it is still what
was archived, so a task redriven and dead-lettered again in between stays). A crash between
the two steps leaves the tasks in the store, and the next round archives them again: every
task is archived at least once before it leaves, and none is lost.

:func:`retain` is a queue's round of it for the worker's upkeep (DEAD tasks past the queue's
``dead_ttl``; SUCCEEDED and CANCELLED ones past its ``task_ttl`` when it archives them), with
the queue's retention record taken and given back (:mod:`rdq.retention._record`), the metrics,
the audit entry and the log. :func:`archive_then_purge` is an operator's purge that archives
first.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rdq import metrics
from rdq.audit import record_action
from rdq.blobs import PAYLOAD_SIZE_HEADER, Blobs, reference_of
from rdq.retention._record import give_back, take
from rdq.retention._sinks import Archive
from rdq.spi import (
    DLQFilter,
    Envelope,
    Page,
    Status,
    Storage,
    TaskFilter,
    bounds,
    status_time,
)

__all__ = [
    "PAGE",
    "Expiry",
    "RetentionRound",
    "archive_then_expire",
    "archive_then_purge",
    "retain",
]

PAGE = 200
"""Tasks read, archived and expired at a time."""
ROUND_PAGES = 25
"""Pages one round of a queue's retention takes at most (the next round goes on)."""
LEASE = timedelta(minutes=5)
"""How long a worker holds a queue's retention for a round before another may take it."""
_US = timedelta(microseconds=1)
WRITE_BYTES = 64 * 1024 * 1024
"""Payload bytes read back from the blob store for one write to the archive at most (a page
of tasks whose payloads are kept by reference is written in parts)."""


@dataclass(frozen=True)
class Expiry:
    """What to remove: the tasks of ``status`` finished before ``before``, and why."""

    status: Status
    before: datetime
    why: str
    """The setting that says so, in words (``dead_ttl 30d``)."""


@dataclass
class RetentionRound:
    """What one round did for one queue."""

    queue: str
    archived: dict[str, int] = field(default_factory=dict)
    expired: dict[str, int] = field(default_factory=dict)
    where: str | None = None
    error: str | None = None
    skipped: bool = False
    """Another worker held the queue's retention: this one did nothing."""

    @property
    def count(self) -> int:
        return sum(self.expired.values())


async def _finished_before(
    storage: Storage, queue: str, expiry: Expiry
) -> AsyncIterator[list[Envelope]]:
    """Pages of the tasks of ``queue`` in ``expiry.status`` finished before ``expiry.before``,
    oldest first, with their attempts (filtered here too for a store without
    ``filter_pushdown``)."""
    cursor: str | None = None
    for _ in range(ROUND_PAGES):
        page = Page(limit=PAGE, cursor=cursor, include_attempts=True)
        if expiry.status == Status.DEAD:
            chosen = DLQFilter(dead_lettered_before=expiry.before)
            tasks, cursor = await storage.dlq_list(queue, chosen, page)
        else:
            task_filter = TaskFilter(status=expiry.status, before=expiry.before)
            tasks, cursor = await storage.list_tasks(queue, task_filter, page)
        kept = [
            t
            for t in tasks
            if t.status == expiry.status
            and (at := status_time(t)) is not None
            and at < expiry.before
        ]
        if kept:
            yield kept
        if cursor is None or len(kept) < len(tasks):  # ordered by time: the rest is newer
            return


async def archive_then_expire(
    storage: Storage,
    archive: Archive,
    queue: str,
    tasks: Sequence[Envelope],
    blobs: Blobs | None = None,
) -> tuple[int, str]:
    """Write ``tasks`` (finished tasks of ``queue``, read with their attempts) to ``archive``,
    then expire exactly those from the store; return how many left it, and where they went.
    A task with no status time (a corrupt one) is neither archived nor expired. With
    ``blobs``, a payload kept by reference is archived whole (read back first), so the
    archive holds what the blob store lets go once the task has left."""
    kept = [t for t in tasks if status_time(t) is not None and t.corrupt is None]
    if not kept:
        return 0, ""
    where = ""
    for part in _parts(kept) if blobs is not None else [kept]:
        where = await archive.write(await blobs.readable(part) if blobs is not None else part)
    before = max(at for t in kept if (at := status_time(t)) is not None) + _US
    expired = 0
    for start in range(0, len(kept), bounds.MAX_SELECTOR_IDS):
        ids = [t.id for t in kept[start : start + bounds.MAX_SELECTOR_IDS]]
        expired += await storage.expire_tasks(queue, ids, before)
    return expired, where


def _parts(tasks: Sequence[Envelope]) -> list[list[Envelope]]:
    """``tasks`` in parts whose payloads kept by reference take at most :data:`WRITE_BYTES`
    together (a payload larger than that is a part of its own)."""
    parts: list[list[Envelope]] = [[]]
    size = 0
    for task in tasks:
        weight = _referenced_bytes(task)
        if parts[-1] and size + weight > WRITE_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(task)
        size += weight
    return parts


def _referenced_bytes(task: Envelope) -> int:
    if reference_of(task) is None:
        return 0
    try:
        return int(task.headers.get(PAYLOAD_SIZE_HEADER, "0"))
    except ValueError:
        return 0


async def archive_then_purge(
    storage: Storage,
    archive: Archive,
    queue: str,
    tasks: Sequence[Envelope],
    blobs: Blobs | None = None,
) -> tuple[int, str]:
    """An operator's purge of ``tasks`` (DEAD or CANCELLED, read with their attempts), archived
    first: :func:`archive_then_expire`, counted in the metrics."""
    expired, where = await archive_then_expire(storage, archive, queue, tasks, blobs)
    for status, count in _by_status(tasks).items():
        metrics.ARCHIVED.labels(queue, status).inc(count)
    return expired, where


def _by_status(tasks: Sequence[Envelope]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task.status.value] = counts.get(task.status.value, 0) + 1
    return counts


async def _has_work(storage: Storage, queue: str, expiry: Expiry) -> bool:
    async for _ in _finished_before(storage, queue, expiry):
        return True
    return False


async def retain(
    storage: Storage,
    archive: Archive,
    queue: str,
    expiries: Sequence[Expiry],
    *,
    runner: str,
    now: datetime,
    log: Any = None,
    blobs: Blobs | None = None,
) -> RetentionRound | None:
    """One round of ``queue``'s retention: for each expiry, archive then expire what it
    selects (up to :data:`ROUND_PAGES` pages each). ``None`` when there was nothing to do.

    With ``control`` the round runs only if this runner takes the queue's retention record
    (another worker's round is left alone: ``skipped``) and adds its counts to it after, also
    when it stopped on an error. The error (an archive that refused a batch, a store error) is
    re-raised once the record, the metrics and the audit entry say what was done."""
    work = [e for e in expiries if await _has_work(storage, queue, e)]
    if not work:
        return None
    result = RetentionRound(queue)
    shared = storage.capabilities().control
    if shared and not await take(storage, queue, runner, now, LEASE):
        result.skipped = True
        return result
    failure: BaseException | None = None
    try:
        for expiry in work:
            status = expiry.status.value
            async for page in _finished_before(storage, queue, expiry):
                expired, where = await archive_then_expire(storage, archive, queue, page, blobs)
                result.where = where or result.where
                result.archived[status] = result.archived.get(status, 0) + len(page)
                result.expired[status] = result.expired.get(status, 0) + expired
                metrics.ARCHIVED.labels(queue, status).inc(len(page))
                metrics.EXPIRED.labels(queue, status).inc(expired)
    except Exception as exc:
        failure = exc
        result.error = f"{type(exc).__name__}: {exc}"
        metrics.ARCHIVE_FAILURES.labels(queue).inc()
    finally:
        if shared:
            with contextlib.suppress(Exception):  # its lease lapses if this cannot be written
                await give_back(
                    storage,
                    queue,
                    runner,
                    now,
                    result.archived,
                    result.expired,
                    result.where,
                    result.error,
                )
    if result.count or result.error:
        await _audit(storage, queue, work, runner, result)
    if log is not None and (result.count or result.error):
        log.info(
            "retention archived and removed finished tasks",
            queue=queue,
            archived=sum(result.archived.values()),
            expired=result.count,
            archive=result.where,
            error=result.error,
        )
    if failure is not None:
        raise failure
    return result


async def _audit(
    storage: Storage, queue: str, work: Sequence[Expiry], runner: str, done: RetentionRound
) -> None:
    selector: dict[str, Any] = {
        "expire": [
            {"status": e.status.value, "before": e.before.isoformat(), "why": e.why} for e in work
        ],
    }
    if done.where:
        selector["archive"] = done.where
    reason = "; ".join(e.why for e in work) + (f"; archived to {done.where}" if done.where else "")
    await record_action(
        storage,
        [],
        "expire",
        queue,
        selector,
        runner,
        reason[: bounds.MAX_AUDIT_REASON_LENGTH],
        done.count,
        done.error,
    )
