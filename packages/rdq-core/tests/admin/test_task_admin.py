"""TaskAdmin beyond the DLQ: tasks in every status, cancel, groups, the stored audit trail, and
pages bounded in bytes — with the store filtering and with the admin filtering for it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import structlog

from rdq.admin import TaskAdmin, TaskSelector
from rdq.audit import AUDIT_ATTEMPTS, COUNT_UNKNOWN, MemoryAuditSink
from rdq.errors import StaleClaim, StaleCursor, StorageUnavailable, ValidationError
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
    TaskFilter,
)
from rdq_compliance.testing import FaultyStorage


async def _pending(storage: Storage, n: int, queue: str = "q") -> None:
    for i in range(n):
        handler = "a" if i % 2 == 0 else "b"
        await storage.enqueue(Envelope(id=f"p{i:03d}", queue=queue, handler_ref=handler))


async def _pages(admin: TaskAdmin, task_filter: TaskFilter, limit: int) -> list[str]:
    seen: list[str] = []
    cursor = None
    for _ in range(1000):
        tasks, cursor = await admin.list_tasks("q", task_filter, Page(limit=limit, cursor=cursor))
        seen.extend(t.id for t in tasks)
        if cursor is None:
            return seen
    raise AssertionError("paging did not end")


@pytest.mark.asyncio
@pytest.mark.parametrize("limit", [1, 7, 1000])
async def test_tasks_of_any_status_page_through_every_match_once(
    storage: Storage, limit: int
) -> None:
    await _pending(storage, 40)
    admin = TaskAdmin(storage)
    only_a = TaskFilter(status=Status.PENDING, handler_ref="a")
    assert await _pages(admin, only_a, limit) == [f"p{i:03d}" for i in range(0, 40, 2)]
    assert await _pages(admin, TaskFilter(status=Status.DEAD), limit) == []
    claimed = await storage.claim_due("q", 5, timedelta(seconds=60), worker_id="w-1")
    assert len(claimed) == 5
    in_flight, _ = await admin.list_tasks("q", TaskFilter(status=Status.IN_FLIGHT))
    assert {t.id for t in in_flight} == {c.task.id for c in claimed}
    assert all(t.claimed_by == "w-1" and t.lease_expires_at for t in in_flight)


@pytest.mark.asyncio
async def test_a_task_cursor_of_another_filter_is_stale(storage: Storage) -> None:
    await _pending(storage, 6)
    admin = TaskAdmin(storage)
    a = TaskFilter(status=Status.PENDING, handler_ref="a")
    _, cursor = await admin.list_tasks("q", a, Page(limit=1))
    assert cursor is not None
    with pytest.raises(StaleCursor):
        await admin.list_tasks("q", TaskFilter(status=Status.PENDING), Page(limit=1, cursor=cursor))


@pytest.mark.asyncio
async def test_cancel_by_ids_revokes_running_tasks_and_is_audited_in_the_store(
    storage: Storage,
) -> None:
    await _pending(storage, 4)
    (claim,) = await storage.claim_due("q", 1, timedelta(seconds=60), worker_id="w")
    sink = MemoryAuditSink()
    admin = TaskAdmin(storage, sinks=[sink])
    selector = TaskSelector.by_ids(claim.task.id, "p001", "missing")
    assert await admin.cancel("q", selector, actor="ops", dry_run=True) == 2
    assert sink.records == []
    count = await admin.cancel("q", selector, actor="ops", reason="customer left")
    assert count == 2
    assert (await storage.get("p001")).status == Status.CANCELLED
    assert (await storage.get(claim.task.id)).status == Status.CANCELLED
    attempt = Attempt(number=1, outcome=Outcome.SUCCEEDED)
    with pytest.raises(StaleClaim):  # the worker's claim was revoked
        await storage.complete(claim.task.id, claim.token, attempt)
    entries, _ = await admin.list_audit(AuditFilter(action="cancel"))
    (entry,) = entries
    assert (entry.actor, entry.queue, entry.count, entry.reason) == ("ops", "q", 2, "customer left")
    assert entry.selector == {"ids": [claim.task.id, "p001", "missing"]}
    assert entry.id and entry.time
    (record,) = sink.records
    assert record.id == entry.id and record.time == entry.time


@pytest.mark.asyncio
async def test_cancel_by_filter_walks_the_whole_selection(storage: Storage) -> None:
    await _pending(storage, 1203)
    admin = TaskAdmin(storage)
    progress: list[tuple[int, int | None]] = []
    only_b = TaskFilter(status=Status.PENDING, handler_ref="b")
    assert await admin.cancel("q", TaskSelector.by_filter(only_b), actor="x", dry_run=True) == 601
    count = await admin.cancel(
        "q",
        TaskSelector.by_filter(only_b),
        actor="ops",
        progress=lambda d, t: progress.append((d, t)),
    )
    assert count == 601
    assert progress[-1] == (601, 601)
    stats = await storage.stats("q")
    assert (stats.pending, stats.cancelled) == (602, 601)
    left = await _pages(admin, TaskFilter(status=Status.PENDING), 1000)
    assert left == [f"p{i:03d}" for i in range(0, 1203, 2)]


@pytest.mark.asyncio
async def test_cancel_refuses_what_cannot_be_cancelled(storage: Storage) -> None:
    with pytest.raises(ValidationError) as info:
        TaskSelector.by_filter(TaskFilter(status=Status.DEAD))
    assert info.value.field == "filter.status"
    with pytest.raises(ValidationError):
        TaskSelector(ids=["a"], filter=TaskFilter(status=Status.PENDING))
    admin = TaskAdmin(storage)
    with pytest.raises(ValidationError) as info:
        await admin.cancel("q", TaskSelector.by_ids("bad id!"), actor="x")
    assert info.value.field == "selector.ids[0]"
    with pytest.raises(ValidationError) as info:
        await admin.cancel("q", Selector.by_ids("a"), actor="x")  # type: ignore[arg-type]
    assert info.value.field == "selector"


@pytest.mark.asyncio
async def test_groups_and_a_group_redrive(storage: Storage, dead_letter: Any) -> None:
    for i in range(9):
        await dead_letter(
            storage,
            f"d{i}",
            handler_ref="charge" if i < 6 else "email",
            error_type="GatewayDown" if i < 4 else "KeyError",
        )
    admin = TaskAdmin(storage)
    groups = await admin.dlq_groups("q")
    assert [(g.handler_ref, g.error_type, g.count) for g in groups] == [
        ("charge", "GatewayDown", 4),
        ("email", "KeyError", 3),
        ("charge", "KeyError", 2),
    ]
    assert all(g.first_dead_lettered_at <= g.last_dead_lettered_at for g in groups)
    group = Selector.by_filter(DLQFilter(handler_ref="charge", error_type="GatewayDown"))
    assert await admin.redrive("q", group, actor="ops", dry_run=True) == 4
    assert await admin.redrive("q", group, actor="ops", reason="gateway back") == 4
    assert [(g.handler_ref, g.error_type) for g in await admin.dlq_groups("q")] == [
        ("email", "KeyError"),
        ("charge", "KeyError"),
    ]


@pytest.mark.asyncio
async def test_purge_by_ids_also_deletes_cancelled_tasks(storage: Storage) -> None:
    await _pending(storage, 3)
    admin = TaskAdmin(storage)
    await admin.cancel("q", TaskSelector.by_ids("p000"), actor="ops")
    selector = Selector.by_ids("p000", "p001")
    assert await admin.purge("q", selector, actor="ops", dry_run=True) == 1
    assert await admin.purge("q", selector, actor="ops") == 1
    assert (await storage.stats("q")).cancelled == 0
    assert (await storage.get("p001")).status == Status.PENDING


def _audit_down(storage: Storage) -> FaultyStorage:
    """A store whose audit trail cannot be written (the rest works)."""
    return FaultyStorage(
        storage, {"append_audit": (1_000, StorageUnavailable("audit table locked"))}
    )


@pytest.mark.asyncio
async def test_an_action_the_store_cannot_audit_still_answers_its_count_and_is_logged(
    storage: Storage,
) -> None:
    """The cancel happened: it answers its count (the API says 200, not 503); the store's
    refusal to record it, after retries, is an error log line and a metric, and the log and
    the sinks still get the record."""
    await _pending(storage, 2)
    sink = MemoryAuditSink()
    down = _audit_down(storage)
    admin = TaskAdmin(down, sinks=[sink])
    with structlog.testing.capture_logs() as logs:
        assert await admin.cancel("q", TaskSelector.by_ids("p000"), actor="ops") == 1
    assert (await storage.get("p000")).status == Status.CANCELLED
    assert down.calls["append_audit"] == AUDIT_ATTEMPTS
    (record,) = sink.records
    assert record.count == 1 and record.id is None
    [error] = [e for e in logs if e["event"] == "the store did not record the audit entry"]
    assert error["log_level"] == "error" and "audit table locked" in error["error"]
    assert [e["count"] for e in logs if e.get("audit")] == [1], "the rdq.audit log has it"


class _AppliedThenTimedOut(ForwardingStorage):
    """A store whose redrive is applied but whose answer never arrives (a client timeout
    after the database completed the statement), and whose purge is refused."""

    async def redrive(self, queue: str, selector: Selector) -> int:
        await self.inner.redrive(queue, selector)
        raise StorageUnavailable("no answer within the operation timeout (10 s)")

    async def purge(self, queue: str, selector: Selector) -> int:
        raise ValidationError("refused before anything changed", field="selector")


@pytest.mark.asyncio
@pytest.mark.parametrize("by", ["filter", "ids"])
async def test_a_redrive_whose_answer_is_lost_is_audited_with_an_unknown_count(
    storage: Storage, by: str
) -> None:
    for n in range(3):
        await storage.enqueue(Envelope(id=f"d{n}", queue="q", handler_ref="h"))
        [claimed] = await storage.claim_due("q", 1, timedelta(minutes=1))
        failed = Attempt(number=1, outcome=Outcome.PERMANENT, error_type="Boom")
        await storage.dead_letter(claimed.task.id, claimed.token, failed)
    admin = TaskAdmin(_AppliedThenTimedOut(storage))  # type: ignore[arg-type]
    selector = Selector.by_filter() if by == "filter" else Selector.by_ids("d0", "d1", "d2")
    with pytest.raises(StorageUnavailable):
        await admin.redrive("q", selector, actor="ops")
    assert (await storage.stats("q")).pending == 3, "the store did redrive them"
    [entry], _ = await storage.list_audit(AuditFilter(action="redrive"), Page())
    assert entry.error is not None and entry.error.endswith(
        f"{COUNT_UNKNOWN} (0 known done before it)"
    )
    assert entry.count == 0
    with pytest.raises(ValidationError):  # refused: nothing done, the count is known
        await admin.purge("q", Selector.by_ids("d0"), actor="ops")
    [entry], _ = await storage.list_audit(AuditFilter(action="purge"), Page())
    assert entry.error is not None and COUNT_UNKNOWN not in entry.error


@pytest.mark.asyncio
async def test_pages_stop_at_a_byte_budget_and_resume_exactly(storage: Storage) -> None:
    for i in range(12):
        await storage.enqueue(
            Envelope(id=f"big{i:02d}", queue="q", handler_ref="h", payload="z" * 50_000)
        )
    admin = TaskAdmin(storage)
    pending = TaskFilter(status=Status.PENDING)
    seen: list[str] = []
    sizes: list[int] = []
    cursor = None
    for _ in range(50):
        tasks, cursor = await admin.list_tasks(
            "q", pending, Page(limit=1000, cursor=cursor), max_bytes=120_000
        )
        seen.extend(t.id for t in tasks)
        sizes.append(len(tasks))
        if cursor is None:
            break
    assert seen == [f"big{i:02d}" for i in range(12)]
    assert max(sizes) == 2 and min(sizes) >= 1


@pytest.mark.asyncio
async def test_list_queues_names_every_queue_with_a_task(storage: Storage) -> None:
    await _pending(storage, 2, queue="alpha")
    await storage.enqueue(Envelope(id="b1", queue="beta", handler_ref="h"))
    admin = TaskAdmin(storage)
    assert [s.queue for s in await admin.list_queues()] == ["alpha", "beta"]
