"""Broken stores for contract version 4 — the claim order a queue's own control asks for (fair
shares, priority aging). Like ``kit_broken_stores``: each a small subclass of the reference
memory store that breaks one promise; ``BROKEN_STORES`` maps it to the kit tests that must
fail against it."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec

from kit_broken_stores import _Broken
from rdq.spi import (
    MAX_PRIORITY,
    NO_GROUP,
    QUEUE_KEY,
    Claimed,
    ClaimOrder,
    Control,
    Envelope,
    OrderKey,
    merged,
    ranked,
)
from rdq_memory._claims import Candidates
from rdq_memory._codec import read
from rdq_memory._state import QueueIndex, Record

# --- fair shares ----------------------------------------------------------------------------


class IgnoresFairShares(_Broken):
    def _claim_order(self, queue: str) -> ClaimOrder:
        return ClaimOrder(None, super()._claim_order(queue).aging)


class _FirstFew(Candidates):
    """Shares only the first few due tasks of the queue (a window in strict order)."""

    WINDOW = 4

    def __iter__(self) -> Iterator[Record]:
        heaps = [self.index.due, *self.index.groups.values()]
        stream = merged(self._band(heap, p) for group in heaps for p, heap in list(group.items()))
        window = [record for _, record in itertools.islice(stream, self.WINDOW)]
        return iter(
            self.order.arrange(
                window, priority=lambda r: r.task.priority, due=_due, keys=lambda r: r.task.keys
            )
        )


def _due(record: Record) -> datetime:
    task = record.task
    due = task.lease_expires_at if task.lease_expires_at is not None else task.next_attempt_at
    assert due is not None
    return due


class SharesOnlyTheFirstFewDueTasks(_Broken):
    def _candidates(
        self,
        index: QueueIndex,
        order: ClaimOrder,
        now: datetime,
        closed: Callable[[Envelope], bool],
    ) -> Candidates:
        return _FirstFew(self._state, index, order, now, closed)


def _last_of_family(keys: Sequence[str], prefix: str) -> str:
    found = [k for k in keys if k.startswith(prefix)]
    return found[-1] if found else NO_GROUP


class GroupsByTheLastKeyOfTheFamily(_Broken):
    def _claim_order(self, queue: str) -> ClaimOrder:
        index = self._state.index(queue)
        if index.group_of is not _last_of_family:
            index.group_of = _last_of_family
            index.fair = None  # indexed again, by the broken rule, at this claim
        return super()._claim_order(queue)


class _WithoutTheKeyless(Candidates):
    def __iter__(self) -> Iterator[Record]:
        if self.order.fair is None:
            return super().__iter__()
        groups = [h for g, h in list(self.index.groups.items()) if g != NO_GROUP]
        return ranked(self._group(heaps) for heaps in groups)


class ForgetsTheTasksWithoutAGroup(_Broken):
    def _candidates(
        self,
        index: QueueIndex,
        order: ClaimOrder,
        now: datetime,
        closed: Callable[[Envelope], bool],
    ) -> Candidates:
        return _WithoutTheKeyless(self._state, index, order, now, closed)


class RanksTasksHeldBackFromTheStart(_Broken):
    def _candidates(
        self,
        index: QueueIndex,
        order: ClaimOrder,
        now: datetime,
        closed: Callable[[Envelope], bool],
    ) -> Candidates:
        return Candidates(self._state, index, order, now, lambda task: False)


class _DueOnly(ClaimOrder):
    def key(self, priority: int, due: datetime) -> OrderKey:
        return (due,) if self.aging is None else super().key(priority, due)


class IgnoresPrioritiesWithinAGroup(_Broken):
    def _claim_order(self, queue: str) -> ClaimOrder:
        order = super()._claim_order(queue)
        return order if order.fair is None else _DueOnly(order.fair, order.aging)


class KeepsSharingAfterTheControlStops(_Broken):
    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.shared: dict[str, str] = {}

    def _claim_order(self, queue: str) -> ClaimOrder:
        order = super()._claim_order(queue)
        if order.fair is not None:
            self.shared[queue] = order.fair
        elif queue in self.shared:
            return ClaimOrder(self.shared[queue], order.aging)
        return order


class FairClaimDecidesThenLeasesLater(_Broken):
    """Picks the tasks under the lock, leases them after it let go: racing claims overlap."""

    async def _claim_due(
        self, queue: str, limit: int, lease: timedelta, worker_id: str | None
    ) -> list[Claimed]:
        order = self._claim_order(queue)
        if order.strict:
            return await super()._claim_due(queue, limit, lease, worker_id)
        state = self._state
        with state.lock:
            now = self._clock_now()
            index = state.regroup(queue, order.fair)
            candidates = self._candidates(index, order, now, lambda task: False)
            picked = [r for r, _ in zip(candidates, range(limit), strict=False)]
            candidates.restore()
        await asyncio.sleep(0.001)
        with state.lock:
            out = []
            for record in picked:
                self._claim(record, now, lease, worker_id)
                out.append(Claimed(read(record), record.token or ""))
            return out


# --- priority aging ------------------------------------------------------------------------


class IgnoresAging(_Broken):
    def _claim_order(self, queue: str) -> ClaimOrder:
        return ClaimOrder(super()._claim_order(queue).fair, None)


class _FromCreation(Candidates):
    def _band(self, heap: list[Any], priority: int) -> Iterator[tuple[OrderKey, Record]]:
        for _, record in super()._band(heap, priority):
            created = record.task.created_at
            assert created is not None
            yield self.order.key(priority, created), record


class AgesFromCreationNotFromDueTime(_Broken):
    def _candidates(
        self,
        index: QueueIndex,
        order: ClaimOrder,
        now: datetime,
        closed: Callable[[Envelope], bool],
    ) -> Candidates:
        if order.aging is None:
            return super()._candidates(index, order, now, closed)
        return _FromCreation(self._state, index, order, now, closed)


class _Capped(ClaimOrder):
    """Priority plus whole steps waited, capped at the top priority."""

    now: datetime

    def key(self, priority: int, due: datetime) -> OrderKey:
        assert self.aging is not None
        steps = math.floor(max(0.0, (self.now - due).total_seconds()) / self.aging)
        return (-min(MAX_PRIORITY, priority + steps), due)


class AgingCappedAtTheTopPriority(_Broken):
    def _claim_order(self, queue: str) -> ClaimOrder:
        order = super()._claim_order(queue)
        if order.aging is None:
            return order
        capped = _Capped(order.fair, order.aging)
        object.__setattr__(capped, "now", self._clock_now())
        return capped


# --- the settings -----------------------------------------------------------------------------


class ForgetsFairAndAging(_Broken):
    async def _put_control(self, control: Control, expected_version: int) -> Control:
        stored = await super()._put_control(control, expected_version)
        plain = msgspec.structs.replace(stored, fair=None, aging=None)
        with self._state.lock:
            self._state.controls[control.queue][control.key] = plain
        return plain


class TakesFairAndAgingOnAnyKey(_Broken):
    async def put_control(self, control: Control, *, expected_version: int) -> Control:
        if control.key != QUEUE_KEY or control.fair is not None or control.aging is not None:
            return await self._put_control(control, expected_version)
        return await super().put_control(control, expected_version=expected_version)


FAIR = "test_a_shallow_group_is_claimed_within_one_batch_behind_a_deep_one"
ROUND_ROBIN = "test_fair_shares_go_round_robin_among_every_group_and_the_tasks_without_one"
AGING = "test_with_aging_a_lower_priority_task_that_waited_long_enough_goes_first"

# --- the claim's start ---------------------------------------------------------------------


class StartsPastItsOwnClaims(_Broken):
    """Starts each claim of a queue at the due time of the last task it claimed there (the
    inexact floor BENCHMARKS.md measured): a task made due before that — enqueued, admitted
    under a dedup key, imported or rescheduled into the past — is passed over while younger
    ones are claimed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._starts: dict[str, datetime] = {}

    async def _claim_due(
        self, queue: str, limit: int, lease: timedelta, worker_id: str | None
    ) -> list[Claimed]:
        start = self._starts.get(queue)
        hidden: list[tuple[list[tuple[datetime, str, int]], tuple[datetime, str, int]]] = []
        with self._state.lock:
            if start is not None:
                for heap in self._state.index(queue).every_heap():
                    for entry in [e for e in heap if e[0] < start]:
                        heap.remove(entry)
                        hidden.append((heap, entry))
                    heapq.heapify(heap)
        try:
            claimed = await super()._claim_due(queue, limit, lease, worker_id)
        finally:
            with self._state.lock:
                for heap, entry in hidden:
                    heapq.heappush(heap, entry)
        dues = [c.task.next_attempt_at for c in claimed if c.task.next_attempt_at is not None]
        if dues:
            self._starts[queue] = max(dues + ([start] if start is not None else []))
        return claimed


BROKEN_STORES: dict[type, list[str]] = {
    StartsPastItsOwnClaims: [
        "test_a_task_enqueued_due_in_the_past_is_claimed_before_younger_due_tasks",
        "test_a_batch_enqueued_due_in_the_past_is_claimed_before_younger_due_tasks",
        "test_a_task_imported_due_in_the_past_is_claimed_before_younger_due_tasks",
        "test_a_task_admitted_under_a_key_due_in_the_past_is_claimed_before_younger_due_tasks",
        "test_a_task_rescheduled_into_the_past_is_claimed_before_younger_due_tasks",
        "test_racing_claimants_take_tasks_enqueued_due_in_the_past_before_younger_ones",
    ],
    IgnoresFairShares: [
        FAIR,
        ROUND_ROBIN,
        "test_tasks_waiting_before_the_queue_was_made_fair_are_shared_too",
        "test_every_way_a_task_becomes_due_keeps_it_in_its_group",
        "test_tasks_admitted_in_a_batch_or_imported_join_their_group",
        "test_racing_claimants_of_a_fair_queue_never_double_claim_and_reach_every_group",
        "test_aging_orders_each_group_of_a_fair_queue",
    ],
    SharesOnlyTheFirstFewDueTasks: [FAIR, ROUND_ROBIN],
    GroupsByTheLastKeyOfTheFamily: ["test_a_tasks_group_is_its_first_key_of_the_family"],
    ForgetsTheTasksWithoutAGroup: [ROUND_ROBIN],
    RanksTasksHeldBackFromTheStart: [
        "test_fair_shares_honour_the_other_controls_and_rank_only_what_they_let_through"
    ],
    IgnoresPrioritiesWithinAGroup: ["test_priorities_and_due_times_order_each_group"],
    KeepsSharingAfterTheControlStops: [
        "test_a_queue_no_longer_fair_is_claimed_in_priority_order_again"
    ],
    FairClaimDecidesThenLeasesLater: [
        "test_racing_claimants_of_a_fair_queue_never_double_claim_and_reach_every_group",
        "test_racing_claimants_of_an_aged_queue_never_double_claim_and_keep_its_order",
    ],
    IgnoresAging: [
        AGING,
        "test_aging_orders_by_due_time_less_priority_times_aging",
        "test_aging_bounds_the_wait_behind_a_stream_of_higher_priorities",
        "test_aging_orders_each_group_of_a_fair_queue",
    ],
    AgesFromCreationNotFromDueTime: [AGING],
    AgingCappedAtTheTopPriority: [
        "test_aging_bounds_the_wait_behind_a_stream_of_higher_priorities"
    ],
    ForgetsFairAndAging: [
        "test_put_control_keeps_fair_and_refuses_it_on_a_key_or_malformed",
        "test_put_control_keeps_aging_and_refuses_it_on_a_key_or_out_of_range",
    ],
    TakesFairAndAgingOnAnyKey: [
        "test_put_control_keeps_fair_and_refuses_it_on_a_key_or_malformed",
        "test_put_control_keeps_aging_and_refuses_it_on_a_key_or_out_of_range",
    ],
}
"""Each broken store and the kit tests that must fail against it."""
