"""Corrupt stored tasks: a task whose stored form does not decode never makes an operation
raise and never blocks other tasks.

The backend writes such a task through its own test hook, given to the kit as the
``corrupt_task`` fixture (see :class:`~rdq_compliance._fixtures.SuiteFixtures`)."""

from __future__ import annotations

import inspect
from datetime import timedelta

import pytest

from rdq.errors import NotFound
from rdq.spi import (
    Envelope,
    Outcome,
    Page,
    Selector,
    Status,
    Storage,
    TaskFilter,
)
from rdq_compliance._fixtures import CorruptTaskWriter
from rdq_compliance._gates import needs
from rdq_compliance._support import (
    LONG_LEASE,
    SHORT_LEASE,
    attempt,
    clock_passes,
    list_all_tasks,
    list_whole_dlq,
    new_id,
    new_task,
)

__all__ = ["CorruptTaskClauses"]


def _assert_corrupt(task: Envelope, task_id: str, queue: str, where: str) -> None:
    assert task.id == task_id and task.queue == queue, f"{where}: id and queue are kept"
    assert isinstance(task.corrupt, str) and task.corrupt, f"{where} must set `corrupt`"


def _assert_intact(task: Envelope, where: str) -> None:
    assert task.corrupt is None, f"{where}: an intact neighbour is not corrupt"
    assert task.payload == {"n": 1}, f"{where}: an intact neighbour keeps its payload"


async def _neighbours(storage: Storage, queue: str, count: int) -> list[str]:
    """``count`` intact tasks of ``queue``, due about an hour ago."""
    now = await storage.now()
    ids = []
    for n in range(count):
        task = new_task(queue, next_attempt_at=now - timedelta(minutes=60 - n))
        await storage.enqueue(task)
        ids.append(task.id)
    return ids


async def _write(
    corrupt_task: CorruptTaskWriter, queue: str, task_id: str, kind: str = "undecodable"
) -> None:
    """``corrupt_task(queue, task_id, kind=kind)``; skips when the writer takes no ``kind``."""
    if kind != "undecodable":
        try:
            inspect.signature(corrupt_task).bind(queue, task_id, kind=kind)
        except TypeError:
            pytest.skip(f"the corrupt_task fixture takes no `kind` (this test needs {kind!r})")
        except ValueError:  # no signature to inspect: just try
            pass
        await corrupt_task(queue, task_id, kind=kind)
    else:
        await corrupt_task(queue, task_id)


class CorruptTaskClauses:
    """A task whose stored form does not decode is returned by ``get``, ``dlq_list``,
    ``list_tasks`` and ``claim_due`` with ``corrupt`` set (id, queue and status filled in),
    never making them raise; ``claim_due`` hands it out beside intact neighbours;
    ``dead_letter``, ``cancel`` and ``purge`` work on it; it never blocks its queue. So does
    one whose JSON nests deeper than any decoder recurses, or whose time lies outside the
    years 1–9999."""

    since = 2

    @needs("task_listing", "queue_listing")
    @pytest.mark.asyncio
    async def test_a_corrupt_task_is_read_back_with_corrupt_set_and_never_makes_a_read_raise(
        self, storage: Storage, queue: str, corrupt_task: CorruptTaskWriter
    ) -> None:
        task_id = new_id("corrupt")
        await _write(corrupt_task, queue, task_id)
        got = await storage.get(task_id)
        _assert_corrupt(got, task_id, queue, "get")
        assert got.status == Status.PENDING
        listed = await list_all_tasks(storage, queue, TaskFilter(status=Status.PENDING))
        assert [t.id for t in listed] == [task_id], "list_tasks lists the corrupt task"
        _assert_corrupt(listed[0], task_id, queue, "list_tasks")
        assert (await storage.stats(queue)).pending == 1
        assert queue in {s.queue for s in await storage.list_queues()}

    @pytest.mark.asyncio
    async def test_claim_due_returns_a_corrupt_task_beside_its_intact_neighbours(
        self, storage: Storage, queue: str, corrupt_task: CorruptTaskWriter
    ) -> None:
        before = await _neighbours(storage, queue, 2)
        task_id = new_id("corrupt")
        await _write(corrupt_task, queue, task_id)
        after = await _neighbours(storage, queue, 1)
        claimed = await storage.claim_due(queue, 10, LONG_LEASE)
        by_id = {c.task.id: c for c in claimed}
        assert set(by_id) == {*before, task_id, *after}, "one batch: neighbours and the corrupt"
        _assert_corrupt(by_id[task_id].task, task_id, queue, "claim_due")
        assert by_id[task_id].task.status == Status.IN_FLIGHT
        assert by_id[task_id].token, "the corrupt task is claimed with a token"
        for neighbour in (*before, *after):
            _assert_intact(by_id[neighbour].task, "claim_due")
            done = attempt(1, Outcome.SUCCEEDED)
            await storage.complete(neighbour, by_id[neighbour].token, done)

    @needs("task_listing")
    @pytest.mark.asyncio
    async def test_dead_letter_of_a_corrupt_task_puts_it_in_the_dlq_still_marked_corrupt(
        self, storage: Storage, queue: str, corrupt_task: CorruptTaskWriter
    ) -> None:
        task_id = new_id("corrupt")
        await _write(corrupt_task, queue, task_id)
        [claimed] = await storage.claim_due(queue, 1, LONG_LEASE)
        failure = attempt(1, Outcome.PERMANENT, error_type="rdq.CorruptTask")
        await storage.dead_letter(task_id, claimed.token, failure)
        got = await storage.get(task_id)
        _assert_corrupt(got, task_id, queue, "get after dead_letter")
        assert got.status == Status.DEAD and got.dead_lettered_at is not None
        for include in (False, True):
            where = f"dlq_list(include_attempts={include})"
            dead = await list_whole_dlq(storage, queue, include_attempts=include)
            assert [t.id for t in dead] == [task_id], f"{where} lists the corrupt task"
            _assert_corrupt(dead[0], task_id, queue, where)
        listed = await list_all_tasks(storage, queue, TaskFilter(status=Status.DEAD))
        assert [t.id for t in listed] == [task_id], "list_tasks(DEAD) lists the corrupt task"
        _assert_corrupt(listed[0], task_id, queue, "list_tasks(DEAD)")
        assert sum(g.count for g in await storage.dlq_groups(queue)) == 1

    @pytest.mark.asyncio
    async def test_a_corrupt_task_never_blocks_its_queue(
        self, storage: Storage, queue: str, corrupt_task: CorruptTaskWriter
    ) -> None:
        task_id = new_id("corrupt")
        await _write(corrupt_task, queue, task_id)
        [lapsing] = await storage.claim_due(queue, 1, SHORT_LEASE)
        assert lapsing.task.id == task_id and lapsing.task.lease_expires_at is not None
        await clock_passes(storage, lapsing.task.lease_expires_at)
        neighbours = await _neighbours(storage, queue, 3)
        claimed = await storage.claim_due(queue, 10, LONG_LEASE)
        by_id = {c.task.id: c for c in claimed}
        assert set(by_id) == {task_id, *neighbours}, (
            "after its lease lapsed, the corrupt task is reclaimed and its neighbours claimed"
        )
        _assert_corrupt(by_id[task_id].task, task_id, queue, "claim_due after a lapse")
        for neighbour in neighbours:
            _assert_intact(by_id[neighbour].task, "claim_due after a lapse")
        await storage.dead_letter(task_id, by_id[task_id].token, attempt(2, Outcome.PERMANENT))
        await _neighbours(storage, queue, 1)
        assert len(await storage.claim_due(queue, 10, LONG_LEASE)) == 1

    @needs("cancel")
    @pytest.mark.asyncio
    async def test_cancel_and_purge_work_on_a_corrupt_task(
        self, storage: Storage, queue: str, corrupt_task: CorruptTaskWriter
    ) -> None:
        waiting, dead = new_id("corrupt"), new_id("corrupt")
        await _write(corrupt_task, queue, waiting)
        assert await storage.cancel(queue, [waiting]) == 1
        cancelled = await storage.get(waiting)
        _assert_corrupt(cancelled, waiting, queue, "get after cancel")
        assert cancelled.status == Status.CANCELLED
        await _write(corrupt_task, queue, dead)
        [claimed] = await storage.claim_due(queue, 1, LONG_LEASE)
        await storage.dead_letter(dead, claimed.token, attempt(1, Outcome.PERMANENT))
        assert await storage.purge(queue, Selector.by_ids(waiting, dead)) == 2
        for task_id in (waiting, dead):
            with pytest.raises(NotFound):
                await storage.get(task_id)
        assert await storage.dlq_list(queue, None, Page()) == ([], None)

    @pytest.mark.asyncio
    @needs("task_listing")
    @pytest.mark.parametrize("kind", ["deep", "far_time"])
    async def test_a_task_too_deep_or_too_far_in_time_to_decode_is_corrupt_and_spares_its_batch(
        self, storage: Storage, queue: str, corrupt_task: CorruptTaskWriter, kind: str
    ) -> None:
        before = await _neighbours(storage, queue, 2)
        task_id = new_id("corrupt")
        await _write(corrupt_task, queue, task_id, kind)
        after = await _neighbours(storage, queue, 1)
        _assert_corrupt(await storage.get(task_id), task_id, queue, f"get ({kind})")
        listed = await list_all_tasks(storage, queue, TaskFilter(status=Status.PENDING))
        assert {t.id for t in listed} == {*before, task_id, *after}
        for task in listed:
            if task.id == task_id:
                _assert_corrupt(task, task_id, queue, f"list_tasks ({kind})")
            else:
                _assert_intact(task, f"list_tasks ({kind})")
        assert (await storage.stats(queue)).pending == 4
        claimed = await storage.claim_due(queue, 10, LONG_LEASE)
        by_id = {c.task.id: c for c in claimed}
        assert set(by_id) == {*before, task_id, *after}, "one batch: neighbours and the corrupt"
        _assert_corrupt(by_id[task_id].task, task_id, queue, f"claim_due ({kind})")
        for neighbour in (*before, *after):
            _assert_intact(by_id[neighbour].task, f"claim_due ({kind})")
            await storage.complete(neighbour, by_id[neighbour].token, attempt(1, Outcome.SUCCEEDED))
        failure = attempt(1, Outcome.PERMANENT, error_type="rdq.CorruptTask")
        await storage.dead_letter(task_id, by_id[task_id].token, failure)
        for include in (False, True):
            dead = await list_whole_dlq(storage, queue, include_attempts=include)
            assert [t.id for t in dead] == [task_id], f"dlq_list ({kind}) lists the corrupt task"
            _assert_corrupt(dead[0], task_id, queue, f"dlq_list ({kind})")
        assert sum(g.count for g in await storage.dlq_groups(queue)) == 1
        assert await storage.purge(queue, Selector.by_ids(task_id)) == 1
