"""DLQAdmin: listing with filters (pushed down or not), dry runs, redrive and purge, audit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import structlog

from rdq.admin import DLQAdmin
from rdq.audit import AUDIT_ATTEMPTS, AuditRecord, JsonLinesAuditSink, MemoryAuditSink
from rdq.errors import StaleCursor, ValidationError
from rdq.spi import DLQFilter, Page, Selector, Status, Storage


async def _fill(storage: Storage, dead_letter: Any, n: int = 30) -> None:
    for i in range(n):
        await dead_letter(
            storage,
            f"t{i:03d}",
            error_type="Timeout" if i % 3 == 0 else "Boom",
            handler_ref="a" if i % 2 == 0 else "b",
        )


async def _all_pages(admin: DLQAdmin, dlq_filter: DLQFilter | None, limit: int) -> list[str]:
    seen: list[str] = []
    cursor = None
    for _ in range(1000):
        tasks, cursor = await admin.list_dlq("q", dlq_filter, Page(limit=limit, cursor=cursor))
        seen.extend(t.id for t in tasks)
        if cursor is None:
            return seen
    raise AssertionError("paging did not end")


@pytest.mark.asyncio
@pytest.mark.parametrize("limit", [1, 4, 1000])
async def test_filtered_listing_pages_through_every_match_once(
    storage: Storage, dead_letter: Any, limit: int
) -> None:
    await _fill(storage, dead_letter)
    admin = DLQAdmin(storage)
    dlq_filter = DLQFilter(error_type="Timeout", handler_ref="a")
    expected = [f"t{i:03d}" for i in range(30) if i % 3 == 0 and i % 2 == 0]
    assert await _all_pages(admin, dlq_filter, limit) == expected
    assert await _all_pages(admin, None, 7) == [f"t{i:03d}" for i in range(30)]


@pytest.mark.asyncio
async def test_listing_omits_attempts_unless_asked(storage: Storage, dead_letter: Any) -> None:
    await _fill(storage, dead_letter, 3)
    admin = DLQAdmin(storage)
    flt = DLQFilter(error_type="Boom")
    tasks, _ = await admin.list_dlq("q", flt, Page(limit=10))
    assert tasks and all(t.attempts == [] for t in tasks)
    tasks, _ = await admin.list_dlq("q", flt, Page(limit=10, include_attempts=True))
    assert tasks and all(t.attempts[-1].error_type == "Boom" for t in tasks)


@pytest.mark.asyncio
async def test_cursor_of_another_filter_is_stale(storage: Storage, dead_letter: Any) -> None:
    await _fill(storage, dead_letter, 6)
    admin = DLQAdmin(storage)
    _, cursor = await admin.list_dlq("q", DLQFilter(handler_ref="a"), Page(limit=1))
    assert cursor is not None
    with pytest.raises(StaleCursor):
        await admin.list_dlq("q", DLQFilter(handler_ref="b"), Page(limit=1, cursor=cursor))
    with pytest.raises(StaleCursor):
        await admin.list_dlq("q", DLQFilter(handler_ref="a"), Page(limit=1, cursor="garbage!"))


@pytest.mark.asyncio
async def test_dry_run_counts_and_changes_nothing(storage: Storage, dead_letter: Any) -> None:
    await _fill(storage, dead_letter)
    sink = MemoryAuditSink()
    admin = DLQAdmin(storage, sinks=[sink])
    by_filter = Selector.by_filter(DLQFilter(error_type="Timeout"))
    assert await admin.redrive("q", by_filter, actor="ops", dry_run=True) == 10
    assert (
        await admin.purge("q", Selector.by_ids("t000", "t001", "nope"), actor="ops", dry_run=True)
        == 2
    )
    assert (await storage.stats("q")).dlq_depth == 30
    assert sink.records == []


@pytest.mark.asyncio
async def test_redrive_by_filter_moves_only_matches_and_is_audited(
    storage: Storage, dead_letter: Any, tmp_path: Path
) -> None:
    await _fill(storage, dead_letter)
    memory_sink = MemoryAuditSink()
    file_sink = JsonLinesAuditSink(tmp_path / "audit.jsonl")
    admin = DLQAdmin(storage, sinks=[memory_sink, file_sink])
    progress: list[tuple[int, int | None]] = []
    with structlog.testing.capture_logs() as logs:
        count = await admin.redrive(
            "q",
            Selector.by_filter(DLQFilter(error_type="Timeout", handler_ref="b")),
            actor="alice",
            reason="bug 42 fixed",
            progress=lambda done, total: progress.append((done, total)),
        )
    expected = [f"t{i:03d}" for i in range(30) if i % 3 == 0 and i % 2 == 1]
    assert count == len(expected) == 5
    for task_id in expected:
        task = await storage.get(task_id)
        assert task.status == Status.PENDING
        assert task.redrive_count == 1
        assert task.attempts, "history is kept"
    assert (await storage.stats("q")).dlq_depth == 25
    assert progress and progress[-1][0] == 5
    (record,) = memory_sink.records
    assert (record.actor, record.action, record.queue, record.count, record.reason) == (
        "alice",
        "redrive",
        "q",
        5,
        "bug 42 fixed",
    )
    assert record.selector == {"filter": {"error_type": "Timeout", "handler_ref": "b"}}
    assert record.error is None
    assert file_sink.read() == [record]
    line = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[0])
    assert line["actor"] == "alice" and line["count"] == 5 and line["time"].endswith("Z")
    audit_logs = [entry for entry in logs if entry.get("audit")]
    assert len(audit_logs) == 1
    assert audit_logs[0]["actor"] == "alice" and audit_logs[0]["count"] == 5


@pytest.mark.asyncio
async def test_purge_by_ids_counts_only_dead_tasks_of_the_queue(
    storage: Storage, dead_letter: Any
) -> None:
    await _fill(storage, dead_letter, 4)
    await dead_letter(storage, "other", queue="q2")
    sink = MemoryAuditSink()
    admin = DLQAdmin(storage, sinks=[sink])
    count = await admin.purge("q", Selector.by_ids("t000", "t001", "other", "missing"), actor="bob")
    assert count == 2
    assert (await storage.stats("q")).dlq_depth == 2
    assert (await storage.stats("q2")).dlq_depth == 1
    assert sink.records[0].selector == {"ids": ["t000", "t001", "other", "missing"]}
    assert sink.records[0].count == 2


@pytest.mark.asyncio
async def test_purge_by_filter_on_a_large_dlq_reports_progress(
    storage: Storage, dead_letter: Any
) -> None:
    await _fill(storage, dead_letter, 1200)
    admin = DLQAdmin(storage, sinks=[])
    progress: list[tuple[int, int | None]] = []
    count = await admin.purge(
        "q",
        Selector.by_filter(DLQFilter(handler_ref="a")),
        actor="ops",
        progress=lambda d, t: progress.append((d, t)),
    )
    assert count == 600
    assert progress[-1] == (600, 600)
    assert await _all_pages(admin, None, 1000) == [f"t{i:03d}" for i in range(1, 1200, 2)]


@pytest.mark.asyncio
async def test_bad_input_is_rejected_before_anything_changes(
    storage: Storage, dead_letter: Any
) -> None:
    await _fill(storage, dead_letter, 2)
    sink = MemoryAuditSink()
    admin = DLQAdmin(storage, sinks=[sink])
    with pytest.raises(ValidationError) as info:
        await admin.redrive("bad queue!", Selector.by_ids("t000"), actor="x")
    assert info.value.field == "queue"
    with pytest.raises(ValidationError) as info:
        await admin.redrive("q", Selector.by_ids("t000"), actor="")
    assert info.value.field == "actor"
    with pytest.raises(ValidationError):
        await admin.list_dlq("q", None, Page(limit=0))
    assert (await storage.stats("q")).dlq_depth == 2
    assert sink.records == []


class _BrokenSink:
    def __init__(self) -> None:
        self.tries = 0

    async def write(self, record: object) -> None:
        self.tries += 1
        raise OSError("disk full")


class _FlakySink(MemoryAuditSink):
    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    async def write(self, record: AuditRecord) -> None:
        if not self.failed:
            self.failed = True
            raise OSError("try again")
        await super().write(record)


def _audit_failures(destination: str) -> float:
    from prometheus_client import REGISTRY

    labels = {"queue": "q", "action": "purge", "destination": destination}
    return REGISTRY.get_sample_value("rdq_audit_failures_total", labels) or 0.0


@pytest.mark.asyncio
async def test_a_failing_audit_sink_is_reported_and_other_sinks_still_get_the_record(
    storage: Storage, dead_letter: Any
) -> None:
    """The purge was done, so it answers its count: the sink's failure (after retries) is an
    error log line and a count in ``rdq_audit_failures``, never the action's outcome."""
    await _fill(storage, dead_letter, 2)
    good = MemoryAuditSink()
    broken = _BrokenSink()
    admin = DLQAdmin(storage, sinks=[broken, good])
    failures = _audit_failures("_BrokenSink")
    with structlog.testing.capture_logs() as logs:
        assert await admin.purge("q", Selector.by_ids("t000"), actor="ops") == 1
    assert len(good.records) == 1 and good.records[0].count == 1
    assert broken.tries == AUDIT_ATTEMPTS
    assert _audit_failures("_BrokenSink") == failures + 1
    [logged] = [e for e in logs if e["event"] == "audit sink failed"]
    assert logged["log_level"] == "error" and "disk full" in logged["error"]


@pytest.mark.asyncio
async def test_a_sink_that_fails_once_gets_the_record_on_a_retry(
    storage: Storage, dead_letter: Any
) -> None:
    await _fill(storage, dead_letter, 1)
    flaky = _FlakySink()
    admin = DLQAdmin(storage, sinks=[flaky])
    assert await admin.purge("q", Selector.by_ids("t000"), actor="ops") == 1
    assert [r.count for r in flaky.records] == [1]
