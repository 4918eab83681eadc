"""The DLQ listing: order, stable cursors, attempt bodies on request, and filters."""

from __future__ import annotations

import base64
from datetime import datetime

import msgspec
import pytest

from rdq.errors import StaleCursor
from rdq.spi import Capabilities, DLQFilter, Envelope, Page, Selector, Storage
from rdq_compliance._fixtures import require_capability
from rdq_compliance._support import (
    LONG_LEASE,
    attempt,
    claim_one,
    dead_tasks,
    list_whole_dlq,
    new_task,
)

__all__ = ["DLQClauses", "DLQFilterClauses"]


def _order(tasks: list[Envelope]) -> list[tuple[datetime, str]]:
    keys = []
    for task in tasks:
        assert task.dead_lettered_at is not None, f"DLQ task {task.id} has no dead_lettered_at"
        keys.append((task.dead_lettered_at, task.id))
    return keys


async def _mixed_dlq(storage: Storage, queue: str) -> list[Envelope]:
    """Nine DLQ tasks with three handler_refs and three error types, as ``get`` returns them."""
    for n in range(9):
        await storage.enqueue(new_task(queue, handler_ref=f"kit.handlers:h{n % 3}"))
    for n in range(9):
        claimed = await claim_one(storage, queue)
        error_type = ("ValueError", "KeyError", "rdq.Timeout")[n % 3]
        await storage.dead_letter(
            claimed.task.id,
            claimed.token,
            attempt(1, error_type=error_type, error_message=f"failure {n}"),
        )
    tasks = [await storage.get(t.id) for t in await list_whole_dlq(storage, queue)]
    assert len(tasks) == 9
    return tasks


def _expected(tasks: list[Envelope], dlq_filter: DLQFilter) -> list[str]:
    ordered = sorted(zip(_order(tasks), tasks, strict=True), key=lambda pair: pair[0])
    return [task.id for _, task in ordered if dlq_filter.matches(task)]


class DLQClauses:
    """``dlq_list`` pages the DEAD tasks of a queue by ``(dead_lettered_at, id)`` with an
    opaque cursor that never skips or repeats a task while entries are added."""

    @pytest.mark.asyncio
    async def test_dlq_list_orders_by_dead_lettered_at_then_id(
        self, storage: Storage, queue: str
    ) -> None:
        await dead_tasks(storage, queue, 6)
        listed = await list_whole_dlq(storage, queue)
        assert len(listed) == 6
        assert _order(listed) == sorted(_order(listed))
        for task in listed:
            assert task.dead_lettered_at == (await storage.get(task.id)).dead_lettered_at

    @pytest.mark.asyncio
    async def test_dlq_list_only_shows_dead_tasks_of_the_queue(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        dead = set(await dead_tasks(storage, queue, 2))
        await dead_tasks(storage, other_queue, 2)
        for _ in range(3):
            await storage.enqueue(new_task(queue))
        done, _ = await storage.claim_due(queue, 2, LONG_LEASE)
        await storage.complete(done.task.id, done.token, attempt(1))
        assert {t.id for t in await list_whole_dlq(storage, queue)} == dead

    @pytest.mark.asyncio
    async def test_dlq_list_omits_attempts_unless_asked(self, storage: Storage, queue: str) -> None:
        await dead_tasks(storage, queue, 3)
        tasks, _ = await storage.dlq_list(queue, None, Page(limit=10))
        assert len(tasks) == 3
        assert all(t.attempts == [] for t in tasks), "attempt bodies are omitted by default"
        assert all(t.attempt_count == 1 for t in tasks), "the count is still reported"

    @pytest.mark.asyncio
    async def test_dlq_list_includes_attempts_when_asked(
        self, storage: Storage, queue: str
    ) -> None:
        await dead_tasks(storage, queue, 3, error_type="BoomError")
        tasks, _ = await storage.dlq_list(queue, None, Page(limit=10, include_attempts=True))
        assert len(tasks) == 3
        for task in tasks:
            assert task.attempts == (await storage.get(task.id)).attempts
            assert [a.error_type for a in task.attempts] == ["BoomError"]

    @pytest.mark.asyncio
    async def test_dlq_list_of_an_empty_dlq_is_one_empty_last_page(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        assert await storage.dlq_list(queue, None, Page(limit=10)) == ([], None)

    @pytest.mark.asyncio
    async def test_dlq_list_last_page_has_no_cursor(self, storage: Storage, queue: str) -> None:
        await dead_tasks(storage, queue, 4)
        first, cursor = await storage.dlq_list(queue, None, Page(limit=2))
        assert len(first) == 2
        assert isinstance(cursor, str)
        second, after_last = await storage.dlq_list(queue, None, Page(limit=2, cursor=cursor))
        assert len(second) == 2
        assert after_last is None, "a page that ends the DLQ returns no cursor"

    @pytest.mark.asyncio
    async def test_dlq_pagination_visits_every_entry_exactly_once(
        self, storage: Storage, queue: str
    ) -> None:
        ids = await dead_tasks(storage, queue, 7)
        pages: list[list[str]] = []
        cursor: str | None = None
        while True:
            tasks, cursor = await storage.dlq_list(queue, None, Page(limit=2, cursor=cursor))
            pages.append([t.id for t in tasks])
            if cursor is None:
                break
            assert len(pages) <= 4, "seven entries in pages of two take four pages"
        assert [len(p) for p in pages] == [2, 2, 2, 1]
        seen = [task_id for page in pages for task_id in page]
        assert sorted(seen) == sorted(ids)
        whole = [t.id for t in await list_whole_dlq(storage, queue)]
        assert seen == whole, "pages concatenate to the whole ordered DLQ"

    @pytest.mark.asyncio
    async def test_dlq_pagination_never_skips_or_repeats_while_entries_are_added(
        self, storage: Storage, queue: str
    ) -> None:
        original = set(await dead_tasks(storage, queue, 8, prefix="old"))
        seen: list[str] = []
        added: set[str] = set()
        cursor: str | None = None
        for _ in range(100):
            tasks, cursor = await storage.dlq_list(queue, None, Page(limit=3, cursor=cursor))
            seen.extend(t.id for t in tasks)
            if cursor is None:
                break
            # between pages new entries arrive, and the entry the cursor points after is
            # purged: a stable cursor neither skips nor repeats because of either
            added.update(await dead_tasks(storage, queue, 2, prefix="new"))
            assert await storage.purge(queue, Selector.by_ids(tasks[-1].id)) == 1
        else:
            raise AssertionError("the DLQ never reached its last page")
        repeated = sorted({task_id for task_id in seen if seen.count(task_id) > 1})
        assert not repeated, f"entries listed twice: {repeated}"
        skipped = sorted(original - set(seen))
        assert not skipped, f"entries present from the start but never listed: {skipped}"
        assert set(seen) <= original | added

    @pytest.mark.asyncio
    async def test_dlq_list_with_a_malformed_cursor_raises_stale_cursor(
        self, storage: Storage, queue: str
    ) -> None:
        await dead_tasks(storage, queue, 3)
        _, cursor = await storage.dlq_list(queue, None, Page(limit=1))
        assert cursor is not None
        junk = [
            "",
            "not a cursor",
            "AAAA",
            base64.urlsafe_b64encode(b'{"offset": 1}').decode(),
            base64.urlsafe_b64encode(msgspec.json.encode([99, "x", "y", "z"])).decode(),
            cursor[:-3] if len(cursor) > 3 else cursor + "!",
            cursor + "x",
        ]
        for bad in junk:
            with pytest.raises(StaleCursor):
                await storage.dlq_list(queue, None, Page(limit=1, cursor=bad))

    @pytest.mark.asyncio
    async def test_dlq_list_with_a_cursor_of_another_queue_raises_stale_cursor(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        await dead_tasks(storage, queue, 3)
        await dead_tasks(storage, other_queue, 3)
        _, cursor = await storage.dlq_list(queue, None, Page(limit=1))
        assert cursor is not None
        with pytest.raises(StaleCursor):
            await storage.dlq_list(other_queue, None, Page(limit=1, cursor=cursor))


class DLQFilterClauses:
    """With ``filter_pushdown``, every set field of a ``DLQFilter`` must match (error_type of
    the last attempt, handler_ref, ``dead_lettered_after`` inclusive, ``_before`` exclusive)."""

    @pytest.mark.asyncio
    async def test_dlq_filter_by_error_type(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "filter_pushdown")
        tasks = await _mixed_dlq(storage, queue)
        only = DLQFilter(error_type="KeyError")
        listed = [t.id for t in await list_whole_dlq(storage, queue, only)]
        assert listed == _expected(tasks, only)
        assert len(listed) == 3

    @pytest.mark.asyncio
    async def test_dlq_filter_by_handler_ref(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "filter_pushdown")
        tasks = await _mixed_dlq(storage, queue)
        only = DLQFilter(handler_ref="kit.handlers:h2")
        listed = [t.id for t in await list_whole_dlq(storage, queue, only)]
        assert listed == _expected(tasks, only)
        assert len(listed) == 3

    @pytest.mark.asyncio
    async def test_dlq_filter_dead_lettered_after_is_inclusive(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "filter_pushdown")
        tasks = await _mixed_dlq(storage, queue)
        only = DLQFilter(dead_lettered_after=tasks[4].dead_lettered_at)
        listed = [t.id for t in await list_whole_dlq(storage, queue, only)]
        assert listed == _expected(tasks, only)
        assert tasks[4].id in listed

    @pytest.mark.asyncio
    async def test_dlq_filter_dead_lettered_before_is_exclusive(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "filter_pushdown")
        tasks = await _mixed_dlq(storage, queue)
        only = DLQFilter(dead_lettered_before=tasks[4].dead_lettered_at)
        listed = [t.id for t in await list_whole_dlq(storage, queue, only)]
        assert listed == _expected(tasks, only)
        assert tasks[4].id not in listed

    @pytest.mark.asyncio
    async def test_dlq_filter_fields_combine_so_that_all_must_match(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "filter_pushdown")
        tasks = await _mixed_dlq(storage, queue)
        combos = [
            DLQFilter(error_type="ValueError", handler_ref="kit.handlers:h0"),
            DLQFilter(error_type="ValueError", handler_ref="kit.handlers:h1"),
            DLQFilter(
                handler_ref="kit.handlers:h1",
                dead_lettered_after=tasks[1].dead_lettered_at,
                dead_lettered_before=tasks[7].dead_lettered_at,
            ),
            DLQFilter(
                error_type="rdq.Timeout",
                handler_ref="kit.handlers:h2",
                dead_lettered_after=tasks[0].dead_lettered_at,
                dead_lettered_before=tasks[8].dead_lettered_at,
            ),
            DLQFilter(error_type="NoSuchError"),
        ]
        for only in combos:
            listed = [t.id for t in await list_whole_dlq(storage, queue, only)]
            assert listed == _expected(tasks, only), f"wrong selection for {only!r}"

    @pytest.mark.asyncio
    async def test_dlq_filter_pages_follow_the_filter(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "filter_pushdown")
        tasks = await _mixed_dlq(storage, queue)
        only = DLQFilter(error_type="ValueError")
        listed = [t.id for t in await list_whole_dlq(storage, queue, only, limit=1)]
        assert listed == _expected(tasks, only)

    @pytest.mark.asyncio
    async def test_dlq_list_with_a_cursor_of_another_filter_raises_stale_cursor(
        self, storage: Storage, queue: str, capabilities: Capabilities
    ) -> None:
        require_capability(capabilities, "filter_pushdown")
        await _mixed_dlq(storage, queue)
        _, cursor = await storage.dlq_list(queue, DLQFilter(error_type="ValueError"), Page(limit=1))
        assert cursor is not None
        with pytest.raises(StaleCursor):
            await storage.dlq_list(
                queue, DLQFilter(error_type="KeyError"), Page(limit=1, cursor=cursor)
            )
