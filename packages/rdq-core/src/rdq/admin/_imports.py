"""Putting dead tasks back: ``rdq dlq import`` of an archive or an export.

Each DEAD task goes back into its queue's DLQ as it was — id, attempts, counters and times
kept — through ``Storage.import_tasks`` (capability ``import_tasks``), which is idempotent by
id: importing a file twice, or a task the store still holds, changes nothing and says so
(``existing``). A task that is not DEAD (an archive of ``archive_succeeded`` holds SUCCEEDED
ones too), of another queue than the one asked for, invalid, or whose id another queue holds
is skipped, each with why. Every queue that gained tasks gets one audit entry (``import``).

A payload above the inline limit (exports and archives hold payloads whole) goes back to the
blob store first, and the task carries its reference, as a submit does (see
:mod:`rdq.blobs`); into a store that keeps no references it is skipped as too large.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from rdq.audit import AuditSink, check_action, record_action
from rdq.blobs import Blobs, Offloaded
from rdq.errors import IDConflict, ValidationError
from rdq.spi import Envelope, Status, Storage, bounds, require

__all__ = ["ImportReport", "import_dead"]


class ImportReport(msgspec.Struct, kw_only=True):
    """What an import did: tasks put back into the DLQ (``imported``), already there
    (``existing``: the store holds that id in that queue), and skipped, each with why."""

    imported: int = 0
    existing: int = 0
    skipped: list[dict[str, str]] = []
    queues: dict[str, int] = {}
    """Tasks imported, by queue."""

    def skip(self, task_id: str, why: str) -> None:
        self.skipped.append({"id": task_id, "why": why})


async def import_dead(
    storage: Storage,
    tasks: Iterable[Envelope],
    *,
    actor: str,
    queue: str | None = None,
    reason: str | None = None,
    sinks: Sequence[AuditSink] = (),
    report: ImportReport | None = None,
    blobs: Blobs | None = None,
) -> ImportReport:
    """Import the DEAD tasks of ``tasks`` (of ``queue`` only, when named) back into the store;
    see the module docstring. ``report`` accumulates over several calls (pages of a file).
    ``blobs``: where payloads above the inline limit go."""
    require(storage, "import_tasks", "rdq dlq import")
    if queue is not None:
        bounds.check_queue(queue)
    check_action(queue or "import", actor, reason)
    report = report if report is not None else ImportReport()
    batch: list[Envelope] = []
    written: list[Offloaded | None] = []
    if not storage.capabilities().payload_refs:
        blobs = None
    before = dict(report.queues)
    for task in tasks:
        if queue is not None and task.queue != queue:
            report.skip(task.id, f"of queue {task.queue!r}, not {queue!r}")
            continue
        if task.status != Status.DEAD:
            report.skip(task.id, f"{task.status.value}, not DEAD: only dead tasks go back")
            continue
        try:
            if blobs is not None:
                task, blob = await blobs.offload(task)
                written.append(blob)
            bounds.check_imported_task(task)
        except ValidationError as exc:
            report.skip(task.id, f"invalid: {exc}")
            continue
        batch.append(task)
        if len(batch) == bounds.MAX_LIMIT:
            await _import(storage, batch, report, blobs, written)
            batch, written = [], []
    if batch:
        await _import(storage, batch, report, blobs, written)
    for name, count in report.queues.items():
        added = count - before.get(name, 0)
        if added:
            await record_action(
                storage, list(sinks), "import", name, {"file": True}, actor, reason, added, None
            )
    return report


async def _import(
    storage: Storage,
    batch: list[Envelope],
    report: ImportReport,
    blobs: Blobs | None,
    written: list[Offloaded | None],
) -> None:
    try:
        await _import_batch(storage, batch, report)
    finally:
        if blobs is not None:  # the blobs of the tasks stored are still there
            await blobs.keep(written)


async def _import_batch(storage: Storage, batch: list[Envelope], report: ImportReport) -> None:
    try:
        flags = await storage.import_tasks(batch)
    except IDConflict:  # one of them lives in another queue: find which, import the rest
        for task in batch:
            try:
                (stored,) = await storage.import_tasks([task])
            except IDConflict as conflict:
                report.skip(task.id, f"the id is taken in queue {conflict.existing_queue!r}")
                continue
            _count(report, task, stored)
        return
    for task, stored in zip(batch, flags, strict=True):
        _count(report, task, stored)


def _count(report: ImportReport, task: Envelope, stored: bool) -> None:
    if stored:
        report.imported += 1
        report.queues[task.queue] = report.queues.get(task.queue, 0) + 1
    else:
        report.existing += 1
