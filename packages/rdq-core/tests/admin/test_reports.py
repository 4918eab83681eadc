"""What an action came to — matched, done, already gone — and a purge that archives what it
deletes before it does, with the store filtering and with the admin filtering for it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from rdq.admin import ActionReport, TaskAdmin, TaskSelector
from rdq.retention import DirectoryArchive, read_tasks
from rdq.spi import (
    Attempt,
    AuditFilter,
    DLQFilter,
    Envelope,
    ForwardingStorage,
    Outcome,
    Page,
    Selector,
    Status,
    Storage,
)


async def _dead(storage: Storage, n: int, error_type: str = "Boom") -> list[str]:
    ids = []
    for i in range(n):
        task_id = f"d{error_type}{i}"
        await storage.enqueue(Envelope(id=task_id, queue="q", handler_ref="h", payload={"i": i}))
        [claimed] = await storage.claim_due("q", 1, timedelta(minutes=1))
        failed = Attempt(number=1, outcome=Outcome.PERMANENT, error_type=error_type)
        await storage.dead_letter(claimed.task.id, claimed.token, failed)
        ids.append(task_id)
    return ids


class _RacedBy(ForwardingStorage):
    """A store on which another operator purges one of the named tasks just before ours
    reaches the store."""

    def __init__(self, inner: Storage, victim: str) -> None:
        super().__init__(inner)
        self.victim = victim

    async def redrive(self, queue: str, selector: Selector) -> int:
        await self.inner.purge(queue, Selector.by_ids(self.victim))
        return await self.inner.redrive(queue, selector)

    async def cancel(self, queue: str, task_ids: list[str]) -> int:  # type: ignore[override]
        await self.inner.cancel(queue, [self.victim])
        return await self.inner.cancel(queue, task_ids)


@pytest.mark.asyncio
@pytest.mark.parametrize("by", ["ids", "filter"])
async def test_a_redrive_says_what_it_matched_did_and_found_already_gone(
    storage: Storage, by: str
) -> None:
    ids = await _dead(storage, 3)
    admin = TaskAdmin(_RacedBy(storage, ids[0]))  # type: ignore[arg-type]
    selector = Selector(ids=ids) if by == "ids" else Selector(filter=DLQFilter(error_type="Boom"))
    report = await admin.act("redrive", "q", selector, actor="ops")
    assert report == ActionReport(matched=3, done=2)
    assert report.gone == 1
    assert report.to_builtins() == {"matched": 3, "done": 2, "gone": 1}


@pytest.mark.asyncio
async def test_a_cancel_says_what_it_matched_did_and_found_already_gone(storage: Storage) -> None:
    for i in range(3):
        await storage.enqueue(Envelope(id=f"p{i}", queue="q", handler_ref="h"))
    admin = TaskAdmin(_RacedBy(storage, "p1"))  # type: ignore[arg-type]
    report = await admin.act("cancel", "q", TaskSelector.by_ids("p0", "p1", "p2"), actor="ops")
    assert (report.matched, report.done, report.gone) == (3, 2, 1)


@pytest.mark.asyncio
async def test_a_dry_run_reports_what_it_matches(storage: Storage) -> None:
    await _dead(storage, 2)
    report = await TaskAdmin(storage).act(
        "purge", "q", Selector.by_filter(), actor="ops", dry_run=True
    )
    assert (report.matched, report.done, report.gone) == (2, 2, 0)
    assert (await storage.stats("q")).dlq_depth == 2


@pytest.mark.asyncio
@pytest.mark.parametrize("by", ["ids", "filter"])
async def test_a_purge_with_an_archive_writes_every_task_there_before_deleting_it(
    storage: Storage, by: str, tmp_path: Path
) -> None:
    ids = await _dead(storage, 3)
    kept = await _dead(storage, 1, error_type="Other")
    admin = TaskAdmin(storage, archive=DirectoryArchive(tmp_path))
    selector = Selector(ids=ids) if by == "ids" else Selector(filter=DLQFilter(error_type="Boom"))
    report = await admin.act("purge", "q", selector, actor="ops", reason="cleanup")
    assert (report.matched, report.done, report.gone, report.archived) == (3, 3, 0, 3)
    assert report.where is not None and report.where.startswith(str(tmp_path))
    archived = {t.id: t for t in read_tasks(tmp_path)}
    assert sorted(archived) == sorted(ids)
    assert all(t.status == Status.DEAD and t.attempts for t in archived.values())
    assert archived[ids[0]].payload == {"i": 0}
    assert (await storage.stats("q")).dlq_depth == 1
    assert (await storage.get(kept[0])).status == Status.DEAD
    [entry], _ = await storage.list_audit(AuditFilter(action="purge"), Page())
    assert (entry.count == 3 and entry.selector == {"filter": {"error_type": "Boom"}}) or (
        entry.selector == {"ids": ids}
    )


@pytest.mark.asyncio
async def test_a_purge_whose_archive_refuses_deletes_nothing(storage: Storage) -> None:
    class Down:
        async def write(self, tasks: object) -> str:
            raise OSError("disk full")

    ids = await _dead(storage, 2)
    admin = TaskAdmin(storage, archive=Down())
    with pytest.raises(OSError):
        await admin.purge("q", Selector(ids=ids), actor="ops")
    assert (await storage.stats("q")).dlq_depth == 2
    [entry], _ = await storage.list_audit(AuditFilter(action="purge"), Page())
    assert entry.count == 0 and "disk full" in (entry.error or "")
