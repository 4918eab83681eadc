"""``rdq.spi.ClaimOrder`` and its helpers: the claim order a store that decides claims in
Python applies, as a store author calls them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rdq.errors import Unsupported, ValidationError
from rdq.spi import (
    NO_GROUP,
    QUEUE_KEY,
    ClaimOrder,
    Control,
    aged_due,
    bounds,
    fair_group,
    ranked,
)
from rdq_memory import MemoryStorage

T0 = datetime(2030, 1, 1, tzinfo=UTC)

Task = tuple[str, int, datetime, list[str]]
"""(id, priority, due, keys)"""


def _arrange(order: ClaimOrder, tasks: list[Task]) -> list[str]:
    arranged = order.arrange(
        tasks, priority=lambda t: t[1], due=lambda t: t[2], keys=lambda t: t[3]
    )
    return [t[0] for t in arranged]


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_default_order_is_strict_priority_then_oldest_due() -> None:
    tasks = [("old", 0, _at(0), []), ("urgent", 5, _at(50), []), ("new", 0, _at(10), [])]
    assert ClaimOrder().strict
    assert _arrange(ClaimOrder(), tasks) == ["urgent", "old", "new"]


def test_aging_orders_by_due_time_less_priority_times_aging() -> None:
    assert aged_due(_at(100), 3, 10.0) == _at(70)
    tasks = [("low", -10, _at(0), []), ("high", 10, _at(30), []), ("later", -10, _at(60), [])]
    # 20 steps of 1 s: the low task goes before a high one due more than 20 s after it
    assert _arrange(ClaimOrder(aging=1.0), tasks) == ["low", "high", "later"]
    # 20 steps of 2 s: not before one due 30 s after it (less than 40 s)
    assert _arrange(ClaimOrder(aging=2.0), tasks) == ["high", "low", "later"]


def test_fair_shares_take_every_groups_first_task_before_any_second() -> None:
    deep = [(f"a{n}", 0, _at(n), ["tenant:a"]) for n in range(5)]
    shallow = [("b0", 0, _at(100), ["dep:x", "tenant:b", "tenant:a"]), ("b1", 0, _at(101), [])]
    got = _arrange(ClaimOrder(fair="tenant:"), deep + shallow)
    assert got == ["a0", "b0", "b1", "a1", "a2", "a3", "a4"]


def test_a_tasks_group_is_its_first_key_with_the_prefix() -> None:
    assert fair_group(["dep:x", "tenant:b", "tenant:a"], "tenant:") == "tenant:b"
    assert fair_group(["dep:x"], "tenant:") == NO_GROUP


def test_ranked_reads_each_group_lazily_one_ahead() -> None:
    read: list[str] = []

    def group(name: str, n: int):  # type: ignore[no-untyped-def]
        for i in range(n):
            read.append(f"{name}{i}")
            yield (i,), f"{name}{i}"

    stream = ranked([group("a", 100), group("b", 2)])
    assert [next(stream) for _ in range(4)] == ["a0", "b0", "a1", "b1"]
    assert len(read) <= 6, "never more than one ahead per group"


def test_fair_and_aging_belong_to_the_queue_control_only() -> None:
    with pytest.raises(ValidationError) as caught:
        bounds.check_control(Control(queue="q", key="dep:x", fair="tenant:"))
    assert caught.value.field == "control.fair"
    with pytest.raises(ValidationError) as caught:
        bounds.check_control(Control(queue="q", key=QUEUE_KEY, aging=0.0))
    assert caught.value.field == "control.aging"
    assert ClaimOrder.of(Control(queue="q", key=QUEUE_KEY, fair="t:", aging=3)) == ClaimOrder(
        "t:", 3
    )


class _VersionThree(MemoryStorage):
    """A store that predates contract version 4: neither flag."""

    def capabilities(self):  # type: ignore[no-untyped-def]
        import msgspec

        return msgspec.structs.replace(
            super().capabilities(), contract_version=3, fair_shares=False, priority_aging=False
        )


@pytest.mark.asyncio
async def test_a_store_without_the_capability_refuses_fair_and_aging_storing_nothing() -> None:
    async with _VersionThree() as store:
        for control, flag in (
            (Control(queue="q", key=QUEUE_KEY, fair="tenant:"), "fair_shares"),
            (Control(queue="q", key=QUEUE_KEY, aging=5.0), "priority_aging"),
        ):
            with pytest.raises(Unsupported) as caught:
                await store.put_control(control, expected_version=0)
            assert flag in str(caught.value)
        assert await store.list_controls("q") == []
