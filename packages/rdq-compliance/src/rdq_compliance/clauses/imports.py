"""Import: tasks moved between stores arrive exactly as they left, in any status."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from rdq.errors import IDConflict, NotFound, ValidationError
from rdq.spi import (
    Attempt,
    Envelope,
    Outcome,
    RetryOverride,
    Selector,
    Status,
    Storage,
    TaskFilter,
)
from rdq_compliance._support import (
    LONG_LEASE,
    claim_one,
    list_all_tasks,
    list_whole_dlq,
    nested,
    new_task,
    snapshot,
)

__all__ = ["ImportClauses"]


def _exported(queue: str, status: Status, now: datetime, **changes: object) -> Envelope:
    """A task as another store would export it in ``status``: every field set."""
    created = now - timedelta(days=2, microseconds=17)
    history = [
        Attempt(
            number=1,
            outcome=Outcome.FAILED,
            error_type="GatewayDown",
            error_message="502 from upstream",
            started_at=created + timedelta(minutes=1),
            finished_at=created + timedelta(minutes=1, seconds=2),
            worker_id="old-host:7:w1",
            traceback='Traceback (most recent call last):\n  File "x.py", line 1\nGatewayDown',
        )
    ]
    task = new_task(
        queue,
        status=status,
        priority=3,
        headers={"traceparent": "00-1-2-01"},
        retry=RetryOverride(max_attempts=9),
        attempts=history,
        attempt_count=1,
        redrive_count=2,
        created_at=created,
        next_attempt_at=created + timedelta(minutes=5),
        extra={"x_origin": {"store": "elsewhere"}},
    )
    if status == Status.PENDING:
        task.next_attempt_at = now + timedelta(days=1, microseconds=3)
    elif status == Status.IN_FLIGHT:
        task.lease_expires_at = now + timedelta(days=1, microseconds=5)
        task.claimed_at = now - timedelta(minutes=1)
        task.claimed_by = "old-host:7:w2"
    elif status == Status.SUCCEEDED:
        task.completed_at = now - timedelta(hours=1, microseconds=9)
    elif status == Status.DEAD:
        task.dead_lettered_at = now - timedelta(hours=2, microseconds=11)
    else:
        task.cancelled_at = now - timedelta(hours=3, microseconds=13)
    for name, value in changes.items():
        setattr(task, name, value)
    return task


class ImportClauses:
    """``import_tasks`` stores tasks verbatim — status, attempts, counters, every timestamp
    and unknown fields — idempotently by id; an IN_FLIGHT task comes without a valid token
    and is reclaimed, with a ``LEASE_EXPIRED`` record, once its lease has passed;
    ``IDConflict`` and ``ValidationError`` store nothing."""

    capability = "import_tasks"

    @pytest.mark.asyncio
    async def test_import_stores_a_task_of_every_status_verbatim(
        self, storage: Storage, queue: str
    ) -> None:
        now = await storage.now()
        tasks = [_exported(queue, status, now) for status in Status]
        assert await storage.import_tasks(tasks) == [True] * len(tasks)
        for task in tasks:
            assert snapshot(await storage.get(task.id)) == snapshot(task), f"{task.status}"
        assert await storage.claim_due(queue, 10, LONG_LEASE) == [], "none of them is due"
        by_status = {t.status: t.id for t in tasks}
        assert [t.id for t in await list_whole_dlq(storage, queue)] == [by_status[Status.DEAD]]
        for status, task_id in by_status.items():
            listed = await list_all_tasks(storage, queue, TaskFilter(status=status))
            assert [t.id for t in listed] == [task_id], f"list_tasks({status})"
        stats = await storage.stats(queue)
        counts = (stats.pending, stats.in_flight, stats.dlq_depth, stats.succeeded)
        assert (counts, stats.cancelled) == ((1, 1, 1, 1), 1)

    @pytest.mark.asyncio
    async def test_an_imported_in_flight_task_is_reclaimed_once_its_lease_has_passed(
        self, storage: Storage, queue: str
    ) -> None:
        now = await storage.now()
        task = _exported(queue, Status.IN_FLIGHT, now, lease_expires_at=now - timedelta(seconds=1))
        assert await storage.import_tasks([task]) == [True]
        reclaimed = await claim_one(storage, queue)
        assert reclaimed.task.id == task.id
        assert reclaimed.task.attempt_count == 2
        record = reclaimed.task.attempts[-1]
        assert (record.number, record.outcome) == (2, Outcome.LEASE_EXPIRED)
        assert record.worker_id == task.claimed_by, "the record names the exported holder"
        assert record.started_at == task.claimed_at
        assert reclaimed.task.attempts[:-1] == task.attempts

    @pytest.mark.asyncio
    async def test_imported_pending_and_dead_tasks_can_be_claimed_and_redriven(
        self, storage: Storage, queue: str
    ) -> None:
        now = await storage.now()
        due = _exported(queue, Status.PENDING, now, next_attempt_at=now - timedelta(seconds=1))
        dead = _exported(queue, Status.DEAD, now)
        assert await storage.import_tasks([due, dead]) == [True, True]
        assert (await claim_one(storage, queue)).task.id == due.id
        assert await storage.redrive(queue, Selector.by_ids(dead.id)) == 1
        redriven = await claim_one(storage, queue)
        assert (redriven.task.id, redriven.task.redrive_count) == (dead.id, 3)

    @pytest.mark.asyncio
    async def test_import_is_idempotent_by_id(self, storage: Storage, queue: str) -> None:
        now = await storage.now()
        task = _exported(queue, Status.DEAD, now)
        assert await storage.import_tasks([task]) == [True]
        before = snapshot(await storage.get(task.id))
        again = _exported(queue, Status.PENDING, now, id=task.id, payload={"other": True})
        fresh = _exported(queue, Status.PENDING, now)
        assert await storage.import_tasks([again, fresh]) == [False, True]
        assert snapshot(await storage.get(task.id)) == before
        enqueued = new_task(queue)
        await storage.enqueue(enqueued)
        assert await storage.import_tasks([_exported(queue, Status.DEAD, now, id=enqueued.id)]) == [
            False
        ]
        assert (await storage.get(enqueued.id)).status == Status.PENDING

    @pytest.mark.asyncio
    async def test_import_with_an_id_conflict_stores_nothing(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        elsewhere = new_task(other_queue)
        await storage.enqueue(elsewhere)
        now = await storage.now()
        fresh = [_exported(queue, status, now) for status in (Status.DEAD, Status.PENDING)]
        clash = _exported(queue, Status.SUCCEEDED, now, id=elsewhere.id)
        with pytest.raises(IDConflict) as caught:
            await storage.import_tasks([fresh[0], clash, fresh[1]])
        assert (caught.value.task_id, caught.value.existing_queue) == (elsewhere.id, other_queue)
        for task in fresh:
            with pytest.raises(NotFound):
                await storage.get(task.id)
        assert (await storage.get(elsewhere.id)).queue == other_queue

    @pytest.mark.asyncio
    async def test_import_of_a_corrupt_or_incomplete_task_raises_validation_error(
        self, storage: Storage, queue: str
    ) -> None:
        now = await storage.now()
        fresh = _exported(queue, Status.DEAD, now)
        cases = {
            "corrupt": _exported(queue, Status.DEAD, now, corrupt="does not decode"),
            "dead_lettered_at": _exported(queue, Status.DEAD, now, dead_lettered_at=None),
            "created_at": _exported(queue, Status.PENDING, now, created_at=None),
            "completed_at": _exported(
                queue, Status.SUCCEEDED, now, completed_at=datetime(2030, 1, 1)
            ),
            "payload": _exported(queue, Status.DEAD, now, payload=nested(5000)),
            "retry.timeout": _exported(
                queue,
                Status.DEAD,
                now,
                retry=RetryOverride(timeout="slow"),  # type: ignore[arg-type]
            ),
            "attempts[0]": _exported(queue, Status.DEAD, now, attempts=["failed once"]),
        }
        for field, broken in cases.items():
            with pytest.raises(ValidationError) as caught:
                await storage.import_tasks([fresh, broken])
            assert caught.value.field == field
        with pytest.raises(NotFound):
            await storage.get(fresh.id)
