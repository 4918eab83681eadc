"""DLQ groups: the dead tasks of a queue counted by handler and last error type."""

from __future__ import annotations

from datetime import datetime

import pytest

from rdq.spi import DLQGroup, Outcome, Selector, Storage, defaults, group_order
from rdq_compliance._support import (
    attempt,
    claim_one,
    dead_tasks,
    list_whole_dlq,
    new_task,
)

__all__ = ["DLQGroupClauses"]


def _expected(tasks: list[tuple[str, str | None, datetime]]) -> list[DLQGroup]:
    groups: dict[tuple[str, str | None], list[datetime]] = {}
    for handler_ref, error_type, at in tasks:
        groups.setdefault((handler_ref, error_type), []).append(at)
    out = [
        DLQGroup(
            handler_ref=handler_ref,
            error_type=error_type,
            count=len(times),
            first_dead_lettered_at=min(times),
            last_dead_lettered_at=max(times),
        )
        for (handler_ref, error_type), times in groups.items()
    ]
    return sorted(out, key=group_order)


async def _mixed_dlq(storage: Storage, queue: str) -> None:
    """Dead tasks of two handlers with several last error types, ``None`` among them, and
    one task whose earlier failure had another error type."""
    for count, error_type, handler in (
        (3, "GatewayDown", "kit.handlers:a"),
        (1, "KeyError", "kit.handlers:a"),
        (2, "GatewayDown", "kit.handlers:b"),
    ):
        await dead_tasks(storage, queue, count, error_type=error_type, handler_ref=handler)
    await storage.enqueue(new_task(queue, handler_ref="kit.handlers:b"))
    claimed = await claim_one(storage, queue)
    await storage.dead_letter(
        claimed.task.id, claimed.token, attempt(1, Outcome.PERMANENT, error_type=None)
    )
    (redriven,) = await dead_tasks(storage, queue, 1, error_type="OldError")
    assert await storage.redrive(queue, Selector.by_ids(redriven)) == 1
    again = await claim_one(storage, queue)
    await storage.dead_letter(redriven, again.token, attempt(1, error_type="KeyError"))


class DLQGroupClauses:
    """``dlq_groups`` counts the DEAD tasks of a queue per (handler_ref, error type of the
    last attempt) with the first and last dead-lettering time, largest group first, ties by
    handler_ref, then error type with ``None`` last (names compared by code point) — the
    same groups ``StorageBase`` computes from ``dlq_list``."""

    @pytest.mark.asyncio
    async def test_dlq_groups_count_dead_tasks_by_handler_and_last_error_type(
        self, storage: Storage, queue: str
    ) -> None:
        await _mixed_dlq(storage, queue)
        dead = await list_whole_dlq(storage, queue, include_attempts=True)
        facts = []
        for task in dead:
            assert task.dead_lettered_at is not None
            last = task.attempts[-1].error_type if task.attempts else None
            facts.append((task.handler_ref, last, task.dead_lettered_at))
        assert await storage.dlq_groups(queue) == _expected(facts)
        counts = {(g.handler_ref, g.error_type): g.count for g in _expected(facts)}
        assert counts == {
            ("kit.handlers:a", "GatewayDown"): 3,
            ("kit.handlers:a", "KeyError"): 1,
            ("kit.handlers:b", "GatewayDown"): 2,
            ("kit.handlers:b", None): 1,
            ("kit.handlers:noop", "KeyError"): 1,
        }

    @pytest.mark.asyncio
    async def test_dlq_groups_come_largest_first_then_by_handler_then_error_type_none_last(
        self, storage: Storage, queue: str
    ) -> None:
        for handler, error_type in (
            ("kit.handlers:y", None),
            ("kit.handlers:y", "B"),
            ("kit.handlers:x", "Z"),
            ("kit.handlers:y", "A"),
            ("kit.handlers:z", "A"),
            ("kit.handlers:z", "A"),
        ):
            await storage.enqueue(new_task(queue, handler_ref=handler))
            claimed = await claim_one(storage, queue)
            record = attempt(1, Outcome.PERMANENT, error_type=error_type)
            await storage.dead_letter(claimed.task.id, claimed.token, record)
        order = [(g.handler_ref, g.error_type, g.count) for g in await storage.dlq_groups(queue)]
        assert order == [
            ("kit.handlers:z", "A", 2),
            ("kit.handlers:x", "Z", 1),
            ("kit.handlers:y", "A", 1),
            ("kit.handlers:y", "B", 1),
            ("kit.handlers:y", None, 1),
        ]

    @pytest.mark.asyncio
    async def test_dlq_groups_of_one_size_order_their_names_by_code_point(
        self, storage: Storage, queue: str
    ) -> None:
        # Names compare as strings of code points (Python's order): U+1F600 comes after
        # U+E000, though UTF-16 code units (Java's String.compareTo, say) put it first.
        for error_type in ("Err\U0001f600", "Err\ue000", "Err"):
            await storage.enqueue(new_task(queue, handler_ref="kit.handlers:a"))
            claimed = await claim_one(storage, queue)
            record = attempt(1, Outcome.PERMANENT, error_type=error_type)
            await storage.dead_letter(claimed.task.id, claimed.token, record)
        groups = await storage.dlq_groups(queue)
        assert [g.error_type for g in groups] == ["Err", "Err\ue000", "Err\U0001f600"]

    @pytest.mark.asyncio
    async def test_dlq_groups_equal_the_groups_computed_from_dlq_list(
        self, storage: Storage, queue: str
    ) -> None:
        await _mixed_dlq(storage, queue)
        reference = await defaults.groups_by_paging(storage, queue)
        assert await storage.dlq_groups(queue) == reference

    @pytest.mark.asyncio
    async def test_dlq_groups_put_one_handler_and_error_type_in_one_group_whatever_the_messages(
        self, storage: Storage, queue: str
    ) -> None:
        """The group key is (handler_ref, last error type) only: messages, tracebacks and
        workers differ from task to task of one group."""
        for n in range(3):
            await storage.enqueue(new_task(queue, handler_ref="kit.handlers:a"))
            claimed = await claim_one(storage, queue)
            failed = attempt(
                1,
                Outcome.PERMANENT,
                error_type="GatewayDown",
                error_message=f"gateway {n} answered 50{n}",
                worker_id=f"kit-worker-{n}",
            )
            await storage.dead_letter(claimed.task.id, claimed.token, failed)
        groups = await storage.dlq_groups(queue)
        assert [(g.handler_ref, g.error_type, g.count) for g in groups] == [
            ("kit.handlers:a", "GatewayDown", 3)
        ], f"one group of three, whatever their messages: {groups}"

    @pytest.mark.asyncio
    async def test_dlq_groups_of_a_queue_without_dead_tasks_is_empty(
        self, storage: Storage, queue: str
    ) -> None:
        for _ in range(2):
            await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        await storage.complete(claimed.task.id, claimed.token, attempt(1, Outcome.SUCCEEDED))
        assert await storage.dlq_groups(queue) == []
