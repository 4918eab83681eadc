"""Operator controls through TaskAdmin: pause and resume, breakers by hand, retry now, and
redrives at a pace (progress, cancel half-way, resumed after its driver died) — each audited.
The paced redrives run on simulated time: their pace is checked to the driver's tick."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from rdq import flow
from rdq.admin import TaskAdmin, TaskSelector, resume_orphans
from rdq.admin._pace import DRIVER_LEASE, TICK
from rdq.audit import MemoryAuditSink
from rdq.errors import Unsupported, ValidationError
from rdq.spi import (
    QUEUE_KEY,
    AuditFilter,
    DLQFilter,
    Envelope,
    Page,
    Selector,
    Status,
    Storage,
    TaskFilter,
)
from rdq_compliance.testing import FaultyStorage

from .conftest import DeadLetter

pytestmark = pytest.mark.asyncio

LEASE = timedelta(seconds=30)


async def _pending(storage: Storage, count: int, handler: str = "h") -> list[str]:
    ids = [f"{handler}-{n:03d}" for n in range(count)]
    for task_id in ids:
        await storage.enqueue(Envelope(id=task_id, queue="q", handler_ref=handler))
    return ids


async def _audit(storage: Storage, action: str) -> list[object]:
    entries, _ = await storage.list_audit(AuditFilter(queue="q", action=action), Page())
    return entries


async def test_a_paused_queue_gives_no_task_to_a_claim_until_it_is_resumed(
    storage: Storage,
) -> None:
    admin = TaskAdmin(storage)
    await _pending(storage, 3)
    paused = await admin.pause("q", actor="ops", reason="deploy of the payment provider")
    assert paused.paused and paused.state["pause"]["by"] == "ops"
    assert await storage.claim_due("q", 10, LEASE) == []
    assert (await storage.stats("q")).pending == 3, "paused tasks keep their place"
    await storage.enqueue(Envelope(id="new", queue="q", handler_ref="h"))  # submits go on
    again = await admin.pause("q", actor="ops")
    assert again.version == paused.version, "pausing a paused queue changes nothing"
    await admin.resume("q", actor="ops", reason="done")
    assert len(await storage.claim_due("q", 10, LEASE)) == 4
    pauses = await _audit(storage, "pause")  # newest first
    assert [e.count for e in pauses] == [0, 1], "the second pause changed nothing"  # type: ignore[attr-defined]
    pause = pauses[-1]
    (resume,) = await _audit(storage, "resume")
    assert (pause.actor, pause.reason, pause.selector) == (  # type: ignore[attr-defined]
        "ops",
        "deploy of the payment provider",
        {"key": QUEUE_KEY},
    )
    assert resume.reason == "done"  # type: ignore[attr-defined]


async def test_pausing_a_handler_holds_only_its_tasks(storage: Storage) -> None:
    admin = TaskAdmin(storage)
    held = await _pending(storage, 3, "charge")
    free = await _pending(storage, 2, "email")
    await admin.pause("q", "handler:charge", actor="ops")
    claimed = {c.task.id for c in await storage.claim_due("q", 10, LEASE)}
    assert claimed == set(free)
    for task_id in held:
        assert (await storage.get(task_id)).status == Status.PENDING


async def test_a_breaker_opened_by_hand_holds_its_tasks_until_closed_by_hand(
    storage: Storage,
) -> None:
    admin = TaskAdmin(storage)
    await _pending(storage, 5, "charge")
    opened = await admin.set_breaker("q", "handler:charge", "open", actor="ops", reason="psp")
    breaker = flow.breaker_of(opened)
    assert breaker.state is flow.State.OPEN and breaker.by == "ops" and opened.gate == 0
    assert await storage.claim_due("q", 10, LEASE) == []
    closed = await admin.set_breaker("q", "handler:charge", "close", actor="ops")
    assert flow.breaker_of(closed).state is flow.State.CLOSED
    assert closed.rate is not None, "the held tasks are let go at a pace"
    assert 1 <= len(await storage.claim_due("q", 10, LEASE)) <= closed.bucket
    assert [e.action for e in await _audit(storage, "breaker.open")] == ["breaker.open"]  # type: ignore[attr-defined]


async def test_retry_now_makes_tasks_waiting_out_a_backoff_due(storage: Storage) -> None:
    admin = TaskAdmin(storage)
    for n in range(3):
        await storage.enqueue(
            Envelope(id=f"w{n}", queue="q", handler_ref="h"), delay=timedelta(hours=1)
        )
    assert await storage.claim_due("q", 10, LEASE) == []
    assert await admin.retry_now("q", TaskSelector(ids=["w0"]), actor="ops") == 1
    assert [c.task.id for c in await storage.claim_due("q", 10, LEASE)] == ["w0"]
    moved = await admin.retry_now(
        "q",
        TaskSelector.by_filter(TaskFilter(status=Status.PENDING, handler_ref="h")),
        actor="ops",
        reason="fixed",
    )
    assert moved == 2
    assert len(await storage.claim_due("q", 10, LEASE)) == 2
    assert [e.count for e in await _audit(storage, "retry_now")] == [2, 1]  # type: ignore[attr-defined]


async def test_flow_controls_on_a_store_without_them_are_refused_naming_the_capability(
    storage: Storage,
) -> None:
    admin = TaskAdmin(FaultyStorage(storage, capabilities={"control": False}))
    with pytest.raises(Unsupported) as caught:
        await admin.pause("q", actor="ops")
    assert caught.value.capability == "control"
    assert await admin.list_controls() == []


@pytest.mark.looptime
async def test_a_paced_redrive_returns_at_most_its_rate_and_reports_progress(
    storage: Storage, dead_letter: DeadLetter
) -> None:
    for n in range(30):
        await dead_letter(storage, f"d{n:02d}", error_type="GatewayDown")
    sink = MemoryAuditSink()
    admin = TaskAdmin(storage, sinks=[sink])
    selector = Selector(filter=DLQFilter(error_type="GatewayDown"))
    op = await admin.start_paced_redrive("q", selector, 20.0, actor="ops", reason="psp back")
    assert (op.total, op.done, op.status) == (30, 0, "running")
    seen: list[int] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    done = await admin.drive_paced_redrive(
        "q", op.id, driver="test", progress=lambda o: seen.append(o.done)
    )
    took = loop.time() - started
    assert (done.status, done.done) == ("done", 30)
    assert seen == sorted(seen) and seen[-1] == 30 and len(seen) >= 3, seen
    assert 30 / 20 <= took <= 30 / 20 + TICK, f"30 tasks at 20/s took {took:.2f}s"
    assert (await storage.stats("q")).dlq_depth == 0
    (record,) = [r for r in sink.records if r.action == "redrive"]
    assert record.count == 30 and record.selector["op"] == op.id and record.reason == "psp back"


@pytest.mark.looptime
async def test_a_paced_redrive_cancelled_half_way_leaves_the_rest_in_the_dlq(
    storage: Storage, dead_letter: DeadLetter
) -> None:
    for n in range(40):
        await dead_letter(storage, f"d{n:02d}")
    admin = TaskAdmin(storage)
    op = await admin.start_paced_redrive("q", Selector(filter=DLQFilter()), 10.0, actor="ops")
    driving = asyncio.create_task(admin.drive_paced_redrive("q", op.id, driver="test"))
    await asyncio.sleep(1.1)
    cancelled = await admin.cancel_paced_redrive("q", op.id, actor="ops", reason="not yet")
    finished = await asyncio.wait_for(driving, 10)
    assert cancelled.status == finished.status == "cancelled"
    left = (await storage.stats("q")).dlq_depth
    assert finished.done == 40 - left
    assert 10 * (1.1 - TICK) <= finished.done <= 10 * 1.1, "what 10/s returns in 1.1 s"
    (record,) = await _audit(storage, "redrive.cancel")
    assert record.count == finished.done  # type: ignore[attr-defined]
    with pytest.raises(ValidationError):
        await admin.cancel_paced_redrive("q", "no-such-op", actor="ops")


@pytest.mark.looptime
async def test_a_paced_redrive_whose_driver_died_is_taken_over_and_finished(
    storage: Storage, dead_letter: DeadLetter
) -> None:
    for n in range(10):
        await dead_letter(storage, f"d{n:02d}")
    admin = TaskAdmin(storage)
    op = await admin.start_paced_redrive(
        "q", Selector(filter=DLQFilter()), 50.0, actor="ops", driver="a-process-that-died"
    )
    assert await resume_orphans(storage, [], ["q"], driver="node-2") == [], (
        "a driver's lease is respected while it lasts"
    )
    (held,) = await admin.list_controls("q")
    expired = held.state["op"] | {"driver_until": "2000-01-01T00:00:00+00:00"}
    await storage.put_control(
        type(held)(queue="q", key=held.key, state={"op": expired}),
        expected_version=held.version,
    )
    (task,) = await resume_orphans(storage, [], ["q"], driver="node-2")
    done = await asyncio.wait_for(task, 10)
    assert (done.status, done.done, done.driver) == ("done", 10, "node-2")
    assert DRIVER_LEASE > 0
    assert [o.id for o in await admin.paced_redrives("q")] == [op.id]
