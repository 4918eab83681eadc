"""Every task findable: ``list_tasks`` per status with stable cursors, and ``list_queues``."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta

import msgspec
import pytest

from rdq.errors import StaleCursor, ValidationError
from rdq.spi import (
    Capabilities,
    Envelope,
    Outcome,
    Page,
    Selector,
    Status,
    Storage,
    TaskFilter,
    status_time,
)
from rdq_compliance._fixtures import require_capability
from rdq_compliance._gates import needs
from rdq_compliance._support import (
    LONG_LEASE,
    SHORT_LEASE,
    attempt,
    claim_one,
    clock_passes,
    dead_tasks,
    list_all_tasks,
    new_task,
)

__all__ = ["TaskListingClauses"]

PER_STATUS = 3


async def _tasks_in_every_status(storage: Storage, queue: str) -> dict[Status, list[str]]:
    """``PER_STATUS`` tasks of ``queue`` in each status, by status."""
    now = await storage.now()
    ids = [new_task(queue).id for _ in range(5 * PER_STATUS)]
    for task_id in ids:
        await storage.enqueue(new_task(queue, task_id, next_attempt_at=now - timedelta(hours=1)))
    claims = await storage.claim_due(queue, 4 * PER_STATUS, LONG_LEASE)
    by_status: dict[Status, list[str]] = {status: [] for status in Status}
    for n, claimed in enumerate(claims):
        task_id, token = claimed.task.id, claimed.token
        kind = n % 4
        if kind == 0:
            await storage.complete(task_id, token, attempt(1, Outcome.SUCCEEDED))
            by_status[Status.SUCCEEDED].append(task_id)
        elif kind == 1:
            await storage.dead_letter(task_id, token, attempt(1, Outcome.PERMANENT))
            by_status[Status.DEAD].append(task_id)
        elif kind == 2:  # due in the future, at times out of id order
            later = now + timedelta(hours=1, seconds=(n * 7) % 5)
            await storage.reschedule(task_id, token, attempt(1), later)
            by_status[Status.PENDING].append(task_id)
        else:
            await storage.extend_lease(task_id, token, timedelta(minutes=20 + (n * 3) % 7))
            by_status[Status.IN_FLIGHT].append(task_id)
    leftover = [i for i in ids if not any(i in group for group in by_status.values())]
    assert await storage.cancel(queue, leftover) == len(leftover)
    by_status[Status.CANCELLED] = leftover
    return by_status


def _in_listing_order(tasks: list[Envelope]) -> list[str]:
    keyed = []
    for task in tasks:
        at = status_time(task)
        assert at is not None, f"{task.status} task {task.id} has no status time"
        keyed.append((at, task.id))
    return [task_id for _, task_id in sorted(keyed)]


class TaskListingClauses:
    """``list_tasks`` lists the tasks of one status by status time then id, with an opaque
    keyset cursor that never skips or repeats a task whose status does not change while
    paging; attempts only when asked; ``list_queues`` gives the stats of every queue that
    holds a task, by name."""

    capability = "task_listing"

    @pytest.mark.asyncio
    @pytest.mark.parametrize("status", list(Status), ids=[s.value for s in Status])
    async def test_list_tasks_lists_one_status_by_status_time_then_id(
        self, storage: Storage, queue: str, status: Status
    ) -> None:
        by_status = await _tasks_in_every_status(storage, queue)
        listed = await list_all_tasks(storage, queue, TaskFilter(status=status), limit=2)
        stored = [await storage.get(task_id) for task_id in by_status[status]]
        assert [t.id for t in listed] == _in_listing_order(stored)
        assert all(t.status == status for t in listed)

    @pytest.mark.asyncio
    async def test_list_tasks_pages_never_skip_or_repeat_while_tasks_arrive(
        self, storage: Storage, queue: str
    ) -> None:
        now = await storage.now()
        original = set()
        for n in range(8):
            task = new_task(queue, next_attempt_at=now + timedelta(hours=2, seconds=n))
            await storage.enqueue(task)
            original.add(task.id)
        seen: list[str] = []
        cursor: str | None = None
        for round_ in range(100):
            page = Page(limit=3, cursor=cursor)
            tasks, cursor = await storage.list_tasks(queue, TaskFilter(status=Status.PENDING), page)
            seen.extend(t.id for t in tasks)
            if cursor is None:
                break
            # arrivals sort before, between and after the pages already read
            for offset in (timedelta(minutes=1), timedelta(hours=2, seconds=3), FAR):
                when = now + offset + timedelta(microseconds=round_)
                await storage.enqueue(new_task(queue, next_attempt_at=when))
        else:
            raise AssertionError("list_tasks never reached its last page")
        repeated = sorted({i for i in seen if seen.count(i) > 1})
        assert not repeated, f"tasks listed twice: {repeated}"
        assert original <= set(seen), f"tasks never listed: {sorted(original - set(seen))}"

    @pytest.mark.asyncio
    async def test_list_tasks_last_page_has_no_cursor_and_an_empty_status_is_one_empty_page(
        self, storage: Storage, queue: str
    ) -> None:
        for _ in range(4):
            await storage.enqueue(new_task(queue))
        pending = TaskFilter(status=Status.PENDING)
        first, cursor = await storage.list_tasks(queue, pending, Page(limit=2))
        assert len(first) == 2 and isinstance(cursor, str)
        second, after_last = await storage.list_tasks(queue, pending, Page(limit=2, cursor=cursor))
        assert len(second) == 2
        assert after_last is None, "a page that ends the list returns no cursor"
        dead = TaskFilter(status=Status.DEAD)
        assert await storage.list_tasks(queue, dead, Page(limit=5)) == ([], None)

    @pytest.mark.asyncio
    async def test_list_tasks_omits_attempts_unless_asked(
        self, storage: Storage, queue: str
    ) -> None:
        await dead_tasks(storage, queue, 2, error_type="BoomError")
        dead = TaskFilter(status=Status.DEAD)
        bare, _ = await storage.list_tasks(queue, dead, Page(limit=10))
        assert len(bare) == 2
        assert all(t.attempts == [] and t.attempt_count == 1 for t in bare)
        full, _ = await storage.list_tasks(queue, dead, Page(limit=10, include_attempts=True))
        for task in full:
            assert task.attempts == (await storage.get(task.id)).attempts
            assert [a.error_type for a in task.attempts] == ["BoomError"]

    @pytest.mark.asyncio
    async def test_list_tasks_with_a_malformed_or_foreign_cursor_raises_stale_cursor(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        for q in (queue, other_queue):
            for _ in range(3):
                await storage.enqueue(new_task(q))
        pending = TaskFilter(status=Status.PENDING)
        _, cursor = await storage.list_tasks(queue, pending, Page(limit=1))
        assert cursor is not None
        junk = [
            "",
            "not a cursor",
            base64.urlsafe_b64encode(msgspec.json.encode([99, "x", "y", "z"])).decode(),
            cursor + "x",
        ]
        for bad in junk:
            with pytest.raises(StaleCursor):
                await storage.list_tasks(queue, pending, Page(limit=1, cursor=bad))
        with pytest.raises(StaleCursor):
            await storage.list_tasks(other_queue, pending, Page(limit=1, cursor=cursor))
        in_flight = TaskFilter(status=Status.IN_FLIGHT)
        with pytest.raises(StaleCursor):
            await storage.list_tasks(queue, in_flight, Page(limit=1, cursor=cursor))

    @pytest.mark.asyncio
    async def test_list_tasks_filters_by_handler_ref_error_type_and_status_time(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "filter_pushdown")
        ids = []
        for n in range(6):
            ids += await dead_tasks(
                storage,
                queue,
                1,
                error_type=("ValueError", "KeyError")[n % 2],
                handler_ref=f"kit.handlers:h{n % 3}",
            )
        tasks = [await storage.get(i) for i in ids]
        times = sorted(t.dead_lettered_at for t in tasks if t.dead_lettered_at is not None)
        filters = [
            TaskFilter(status=Status.DEAD, error_type="KeyError"),
            TaskFilter(status=Status.DEAD, handler_ref="kit.handlers:h1"),
            TaskFilter(status=Status.DEAD, after=times[2]),
            TaskFilter(status=Status.DEAD, before=times[2]),
            TaskFilter(status=Status.DEAD, error_type="ValueError", after=times[1]),
        ]
        for only in filters:
            listed = [t.id for t in await list_all_tasks(storage, queue, only, limit=2)]
            assert listed == _in_listing_order([t for t in tasks if only.matches(t)]), repr(only)

    @pytest.mark.asyncio
    async def test_list_tasks_with_a_bad_page_or_filter_raises_validation_error(
        self, storage: Storage, queue: str
    ) -> None:
        pending = TaskFilter(status=Status.PENDING)
        with pytest.raises(ValidationError) as caught:
            await storage.list_tasks(queue, pending, Page(limit=0))
        assert caught.value.field == "page.limit"
        naive = TaskFilter(status=Status.PENDING, after=datetime(2030, 1, 1))
        with pytest.raises(ValidationError) as caught:
            await storage.list_tasks(queue, naive, Page())
        assert caught.value.field == "filter.after"

    @needs("queue_listing")
    @pytest.mark.asyncio
    async def test_list_queues_gives_every_queue_holding_a_task_by_name_with_its_stats(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        await _tasks_in_every_status(storage, queue)
        (dead,) = await dead_tasks(storage, other_queue, 1)
        listed = await storage.list_queues()
        names = [s.queue for s in listed]
        assert names == sorted(names), "list_queues orders queues by name"
        assert len(names) == len(set(names))
        mine = {s.queue: s for s in listed if s.queue in (queue, other_queue)}
        assert set(mine) == {queue, other_queue}
        for name, stats in mine.items():
            alone = await storage.stats(name)
            assert _counts(stats) == _counts(alone), f"list_queues and stats disagree on {name}"
        assert await storage.purge(other_queue, Selector.by_ids(dead)) == 1
        assert other_queue not in {s.queue for s in await storage.list_queues()}, (
            "a queue whose last task is gone is not listed"
        )

    @pytest.mark.asyncio
    async def test_list_tasks_lists_an_in_flight_task_whose_lease_lapsed_until_it_is_reclaimed(
        self, storage: Storage, queue: str
    ) -> None:
        """A lapsed lease nobody reclaimed yet is still IN_FLIGHT: listed, and counted."""
        await storage.enqueue(new_task(queue))
        (claimed,) = await storage.claim_due(queue, 1, SHORT_LEASE)
        expires = claimed.task.lease_expires_at
        assert expires is not None
        await clock_passes(storage, expires)
        listed = await list_all_tasks(storage, queue, TaskFilter(status=Status.IN_FLIGHT))
        assert [t.id for t in listed] == [claimed.task.id], (
            "an IN_FLIGHT task whose lease lapsed, not yet reclaimed, is listed as IN_FLIGHT"
        )
        assert listed[0].lease_expires_at == expires
        assert (await storage.stats(queue)).in_flight == 1

    @needs("queue_listing", "cancel")
    @pytest.mark.asyncio
    async def test_list_queues_lists_a_queue_that_holds_only_finished_tasks(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        """A queue is listed while it holds a task in any status: only SUCCEEDED, or only
        CANCELLED, still counts."""
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        await storage.complete(claimed.task.id, claimed.token, attempt(1, Outcome.SUCCEEDED))
        cancelled = new_task(other_queue)
        await storage.enqueue(cancelled)
        assert await storage.cancel(other_queue, [cancelled.id]) == 1
        listed = {s.queue: s for s in await storage.list_queues()}
        assert queue in listed, "a queue holding only a SUCCEEDED task is listed"
        assert other_queue in listed, "a queue holding only a CANCELLED task is listed"
        assert (listed[queue].succeeded, listed[other_queue].cancelled) == (1, 1)


FAR = timedelta(days=3)


def _counts(stats: object) -> tuple[object, ...]:
    names = ("pending", "in_flight", "dlq_depth", "succeeded", "cancelled")
    return tuple(getattr(stats, name) for name in names)
