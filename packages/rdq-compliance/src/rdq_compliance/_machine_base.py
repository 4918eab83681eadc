"""What the contract machine stands on, apart from its rules: the store bound to its loop, the
model of what the store should hold, the storage-clock moments an example relies on, the pickers
that resolve drawn indexes to tasks, and the checks of a stored task against the model.

The rules (:class:`~rdq_compliance.stateful.ContractMachine`) draw and run one operation at a
time; everything here is the reference they are checked against and the way they reach the
store, kept apart so that the rules read as the operations they exercise. Nothing here reads
the wall clock or the store's speed (see :mod:`rdq_compliance.stateful`: replays are exact).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine, Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine

from rdq.errors import StaleClaim
from rdq.spi import Envelope, Status, Storage
from rdq_compliance._support import PATIENCE
from rdq_compliance.model import ContractModel

__all__ = ["SLOTS", "ContractMachineBase", "queue_indexes", "slots"]

T = TypeVar("T")
E = TypeVar("E", bound=Exception)

SLOTS = 6
"""Task ids per example: few enough that operations keep hitting the same tasks."""

slots = st.integers(min_value=0, max_value=SLOTS - 1)
queue_indexes = st.integers(min_value=0, max_value=1)


class ContractMachineBase(RuleBasedStateMachine):
    """The state a contract machine keeps beside its store (fresh queue names, ids and model
    per example) and the helpers its rules call; it has no rules of its own."""

    storage: Storage
    loop: asyncio.AbstractEventLoop
    filter_pushdown: bool

    def __init__(self) -> None:
        super().__init__()
        run = uuid.uuid4().hex[:10]
        self.queues = (f"kit-sm-{run}-a", f"kit-sm-{run}-b")
        self.prefix = f"sm-{run}"
        self.model = ContractModel()
        now = self.now()
        self.past = now - timedelta(seconds=1)
        """A moment every later storage reading is past (due at once)."""
        self.future = now + timedelta(days=2)
        """A moment no example lives to see."""
        self.lapsed_by = now
        """Every lease that ends by this storage time has lapsed: the short ones granted so
        far were waited out, a long one ends after the example, an imported one ends at
        :attr:`past` or :attr:`future`."""

    # --- the store and its clock ------------------------------------------------------------

    def call(self, operation: Coroutine[Any, Any, T]) -> T:
        """Run one store operation on the store's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(operation, self.loop).result(PATIENCE)

    def now(self) -> datetime:
        """A reading of the storage clock."""
        return self.call(self.storage.now())

    def task_id(self, slot: int) -> str:
        return f"{self.prefix}-{slot}"

    def stored(self, task_id: str) -> Envelope:
        return self.call(self.storage.get(task_id))

    # --- the pickers ---------------------------------------------------------------------------

    # The pickers draw the same values whatever the store's state (Hypothesis replays a drawn
    # sequence only if its shape never depends on outside state: FlakyStrategyDefinition
    # otherwise) and resolve them from the model alone, whose state is the sequence's.

    def pick_slot(self, data: st.DataObject, *statuses: Status) -> int:
        """Mostly a slot whose task is in one of ``statuses`` (if any), else any slot."""
        aimed = sorted(
            int(t.id.rsplit("-", 1)[1]) for s in statuses for t in self.model.with_status(s)
        )
        aim = data.draw(st.integers(min_value=0, max_value=4), label="aim")
        slot = data.draw(slots, label="slot")
        return aimed[slot % len(aimed)] if aimed and aim > 0 else slot

    def pick_queue(self, data: st.DataObject, *statuses: Status) -> int:
        """Mostly a queue that holds a task in one of ``statuses``."""
        busy = sorted(
            {self.queues.index(t.queue) for s in statuses for t in self.model.with_status(s)}
        )
        aim = data.draw(st.integers(min_value=0, max_value=4), label="aim")
        queue = data.draw(queue_indexes, label="queue")
        return busy[queue % len(busy)] if busy and aim > 0 else queue

    def pick_held(self, data: st.DataObject) -> int:
        """A slot for a fenced call: often one whose lease has lapsed without a reclaim, else
        mostly an IN_FLIGHT one."""
        lapsed = sorted(
            int(t.id.rsplit("-", 1)[1])
            for t in self.model.with_status(Status.IN_FLIGHT)
            if t.lease_expires_at is not None and t.lease_expires_at <= self.lapsed_by
        )
        aim_at_lapsed = data.draw(st.booleans(), label="lapsed")
        slot = self.pick_slot(data, Status.IN_FLIGHT)
        return lapsed[slot % len(lapsed)] if lapsed and aim_at_lapsed else slot

    def pick_token(self, task_id: str, choice: str) -> str:
        task = self.model.tasks.get(task_id)
        if task is None:
            return "made-up"
        if choice == "current" and task.token is not None:
            return task.token
        if choice == "old" and task.old_tokens:
            return task.old_tokens[-1]
        return "made-up"

    # --- leases and checks ----------------------------------------------------------------------

    def wait_out(self, ends: Iterable[datetime | None]) -> None:
        """Wait until the storage clock has passed every lease end in ``ends``."""
        last = max((end for end in ends if end is not None), default=None)
        if last is None:
            return
        deadline = time.monotonic() + PATIENCE
        while (now := self.now()) < last:
            assert time.monotonic() < deadline, "the storage clock does not advance"
            time.sleep(min((last - now).total_seconds(), 0.02))
        self.lapsed_by = max(self.lapsed_by, last)

    def check_task(self, task_id: str) -> None:
        expected = self.model.tasks[task_id]
        stored = self.stored(task_id)
        assert stored.status == expected.status, f"{task_id}: {stored.status} != {expected.status}"
        assert stored.attempt_count == expected.attempt_count
        assert stored.redrive_count == expected.redrive_count
        assert [a.outcome for a in stored.attempts] == expected.outcomes
        assert (stored.queue, stored.priority) == (expected.queue, expected.priority)
        held = (stored.lease_expires_at, stored.claimed_by, stored.claimed_at)
        if expected.status == Status.IN_FLIGHT:
            assert held == (expected.lease_expires_at, expected.claimed_by, expected.claimed_at)
        else:
            assert held == (None, None, None), f"a {stored.status} task holds no lease or claim"

    def expect(self, error: type[E], operation: Coroutine[Any, Any, object]) -> E:
        """Run ``operation``, which must raise ``error``; return the error."""
        try:
            self.call(operation)
        except error as exc:
            return exc
        raise AssertionError(f"expected {error.__name__}")

    def expect_fenced(self, task_id: str, operation: Coroutine[Any, Any, object]) -> None:
        before = self.stored(task_id)
        self.expect(StaleClaim, operation)
        assert self.stored(task_id) == before, "a fenced call changed the task"
