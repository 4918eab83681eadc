"""The Hypothesis state machine: random operation sequences checked against
:class:`~rdq_compliance.model.ContractModel`.

Hypothesis drives rules synchronously, while a store lives on an event loop. The machine runs
in a worker thread and submits each operation to the store's own loop with
:func:`asyncio.run_coroutine_threadsafe`, so any backend (connection pools bound to a loop
included) can be driven. Use :func:`run_contract_machine` from an async test.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from rdq.errors import IDConflict, NotFound, StaleClaim
from rdq.spi import (
    Attempt,
    DLQFilter,
    Envelope,
    Outcome,
    Page,
    Selector,
    Status,
    Storage,
)
from rdq_compliance._support import LONG_LEASE, PATIENCE, storage_now
from rdq_compliance.model import ContractModel

__all__ = ["ContractMachine", "run_contract_machine"]

T = TypeVar("T")
E = TypeVar("E", bound=Exception)

SLOTS = 6
"""Task ids per example: few enough that operations keep hitting the same tasks."""
ERROR_TYPES = ("KitError", "OtherError")
HANDLERS = ("kit.handlers:even", "kit.handlers:odd")

slots = st.integers(min_value=0, max_value=SLOTS - 1)
queue_indexes = st.integers(min_value=0, max_value=1)
#: which token a fenced call presents: the current one, an earlier one, or a made-up one
token_choices = st.sampled_from(["current", "current", "old", "made-up"])


class ContractMachine(RuleBasedStateMachine):
    """Random sequences of every operation against one store, checked step by step.

    Bind it to a store with :meth:`bound` (each example then uses fresh queue names and
    ids, so examples never see each other's tasks)."""

    storage: Storage
    loop: asyncio.AbstractEventLoop
    filter_pushdown: bool

    def __init__(self) -> None:
        super().__init__()
        run = uuid.uuid4().hex[:10]
        self.queues = (f"kit-sm-{run}-a", f"kit-sm-{run}-b")
        self.prefix = f"sm-{run}"
        self.model = ContractModel()
        now = self.call(storage_now(self.storage, self.queues[0]))
        self.past = now - timedelta(seconds=1)
        """A moment every later storage reading is past (due at once)."""
        self.future = now + timedelta(days=2)
        """A moment no example lives to see."""

    @classmethod
    def bound(cls, storage: Storage, loop: asyncio.AbstractEventLoop) -> type[ContractMachine]:
        """A subclass of this machine that drives ``storage`` on ``loop``."""
        return type(
            "ContractMachineFor" + type(storage).__name__,
            (cls,),
            {
                "storage": storage,
                "loop": loop,
                "filter_pushdown": storage.capabilities().filter_pushdown,
            },
        )

    def call(self, operation: Coroutine[Any, Any, T]) -> T:
        """Run one store operation on the store's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(operation, self.loop).result(PATIENCE)

    def task_id(self, slot: int) -> str:
        return f"{self.prefix}-{slot}"

    def stored(self, task_id: str) -> Envelope:
        return self.call(self.storage.get(task_id))

    # --- admission -------------------------------------------------------------------------

    @rule(slot=slots, queue=queue_indexes, delayed=st.booleans())
    def enqueue(self, slot: int, queue: int, delayed: bool) -> None:
        task_id = self.task_id(slot)
        task = Envelope(
            id=task_id,
            queue=self.queues[queue],
            handler_ref=HANDLERS[slot % 2],
            payload={"slot": slot, "queue": queue},
            next_attempt_at=self.future if delayed else None,
        )
        expected = self.model.enqueue(task_id, task.queue, task.handler_ref)
        if isinstance(expected, str):
            conflict = self.expect(IDConflict, self.storage.enqueue(task))
            assert conflict.existing_queue == expected
            return
        assert self.call(self.storage.enqueue(task)) is expected
        if expected:
            stored = self.stored(task_id)
            assert stored.status == Status.PENDING
            self.model.tasks[task_id].due_at = None if delayed else stored.next_attempt_at

    # --- claiming --------------------------------------------------------------------------

    @rule(queue=queue_indexes, limit=st.integers(min_value=1, max_value=4))
    def claim(self, queue: int, limit: int) -> None:
        name = self.queues[queue]
        claimed = self.call(self.storage.claim_due(name, limit, LONG_LEASE))
        tokens = {c.task.id: c.token for c in claimed}
        assert len(tokens) == len(claimed), "claim_due returned a task twice"
        problems = self.model.claim_problems(name, limit, tokens)
        assert not problems, "; ".join(problems)
        for c in claimed:
            expected = self.model.tasks[c.task.id]
            assert c.task.status == Status.IN_FLIGHT
            assert c.task.attempt_count == expected.attempt_count
            assert c.task.redrive_count == expected.redrive_count
            assert c.token not in expected.old_tokens, "a token was handed out twice"
            self.model.claimed(c.task.id, c.token)

    def pick_token(self, task_id: str, choice: str) -> str:
        task = self.model.tasks.get(task_id)
        if task is None:
            return "made-up"
        if choice == "current" and task.token is not None:
            return task.token
        if choice == "old" and task.old_tokens:
            return task.old_tokens[-1]
        return "made-up"

    @rule(slot=slots, choice=token_choices)
    def extend_lease(self, slot: int, choice: str) -> None:
        task_id = self.task_id(slot)
        token = self.pick_token(task_id, choice)
        operation = self.storage.extend_lease(task_id, token, LONG_LEASE)
        if task_id not in self.model.tasks:
            self.expect(NotFound, operation)
        elif not self.model.holds(task_id, token):
            self.expect_fenced(task_id, operation)
        else:
            expires = self.call(operation)
            assert self.stored(task_id).lease_expires_at == expires

    # --- resolution ------------------------------------------------------------------------

    @rule(
        slot=slots,
        choice=token_choices,
        how=st.sampled_from(["complete", "retry-now", "retry-later", "dead-letter"]),
        error=st.sampled_from(ERROR_TYPES),
    )
    def resolve(self, slot: int, choice: str, how: str, error: str) -> None:
        task_id = self.task_id(slot)
        token = self.pick_token(task_id, choice)
        task = self.model.tasks.get(task_id)
        number = (task.attempt_count if task else 0) + 1
        if how == "complete":
            outcome, status, due_at = Outcome.SUCCEEDED, Status.SUCCEEDED, None
            record = Attempt(number=number, outcome=outcome)
            operation = self.storage.complete(task_id, token, record)
        elif how == "dead-letter":
            outcome, status, due_at = Outcome.PERMANENT, Status.DEAD, None
            record = Attempt(number=number, outcome=outcome, error_type=error)
            operation = self.storage.dead_letter(task_id, token, record)
        else:
            outcome, status = Outcome.FAILED, Status.PENDING
            next_at: datetime = self.past if how == "retry-now" else self.future
            due_at = next_at if how == "retry-now" else None
            record = Attempt(number=number, outcome=outcome, error_type=error)
            operation = self.storage.reschedule(task_id, token, record, next_at)
        if task is None:
            self.expect(NotFound, operation)
        elif not self.model.holds(task_id, token):
            self.expect_fenced(task_id, operation)
        else:
            self.call(operation)
            self.model.resolve(task_id, status, outcome, record.error_type, due_at)
            self.check_task(task_id)

    # --- DLQ -------------------------------------------------------------------------------

    def selection(self, data: st.DataObject) -> tuple[list[str] | None, DLQFilter | None, Selector]:
        if self.filter_pushdown and data.draw(st.booleans(), label="by filter"):
            dlq_filter = data.draw(
                st.sampled_from(
                    [
                        DLQFilter(),
                        DLQFilter(error_type=ERROR_TYPES[0]),
                        DLQFilter(handler_ref=HANDLERS[1]),
                        DLQFilter(error_type=ERROR_TYPES[1], handler_ref=HANDLERS[0]),
                    ]
                ),
                label="filter",
            )
            return None, dlq_filter, Selector.by_filter(dlq_filter)
        chosen = data.draw(st.lists(slots, max_size=4), label="slots")
        ids = [self.task_id(s) for s in chosen]
        return ids, None, Selector.by_ids(*ids) if ids else Selector.by_ids("sm-nobody")

    @rule(queue=queue_indexes, data=st.data())
    def redrive(self, queue: int, data: st.DataObject) -> None:
        name = self.queues[queue]
        ids, dlq_filter, selector = self.selection(data)
        expected = self.model.select(name, ids, dlq_filter)
        assert self.call(self.storage.redrive(name, selector)) == len(expected)
        for task in expected:
            stored = self.stored(task.id)
            assert stored.next_attempt_at is not None
            self.model.redriven(task.id, stored.next_attempt_at)
            self.check_task(task.id)

    @rule(queue=queue_indexes, data=st.data())
    def purge(self, queue: int, data: st.DataObject) -> None:
        name = self.queues[queue]
        ids, dlq_filter, selector = self.selection(data)
        expected = self.model.select(name, ids, dlq_filter)
        assert self.call(self.storage.purge(name, selector)) == len(expected)
        for task in expected:
            self.model.purged(task.id)
            self.expect(NotFound, self.storage.get(task.id))

    @rule(queue=queue_indexes)
    def dlq_list(self, queue: int) -> None:
        name = self.queues[queue]
        listed, cursor = self.call(self.storage.dlq_list(name, None, Page(limit=100)))
        assert cursor is None
        assert sorted(t.id for t in listed) == sorted(t.id for t in self.model.dead(name))
        assert all(t.attempts == [] for t in listed)

    # --- operations ------------------------------------------------------------------------

    @rule(slot=slots)
    def get(self, slot: int) -> None:
        task_id = self.task_id(slot)
        if task_id in self.model.tasks:
            self.check_task(task_id)
        else:
            self.expect(NotFound, self.storage.get(task_id))

    @rule(queue=queue_indexes)
    def stats(self, queue: int) -> None:
        name = self.queues[queue]
        stats = self.call(self.storage.stats(name))
        counts = (stats.pending, stats.in_flight, stats.dlq_depth, stats.succeeded)
        assert counts == self.model.counts(name), f"stats {counts} != {self.model.counts(name)}"

    @rule(queue=queue_indexes, everything=st.booleans())
    def purge_succeeded(self, queue: int, everything: bool) -> None:
        name = self.queues[queue]
        cutoff = self.future if everything else self.past - timedelta(days=1)
        expected = self.model.succeeded(name) if everything else []
        assert self.call(self.storage.purge_succeeded(name, cutoff)) == len(expected)
        for task in expected:
            self.model.purged(task.id)

    # --- checks ----------------------------------------------------------------------------

    def check_task(self, task_id: str) -> None:
        expected = self.model.tasks[task_id]
        stored = self.stored(task_id)
        assert stored.status == expected.status, f"{task_id}: {stored.status} != {expected.status}"
        assert stored.attempt_count == expected.attempt_count
        assert stored.redrive_count == expected.redrive_count
        assert [a.outcome for a in stored.attempts] == expected.outcomes
        assert stored.queue == expected.queue
        if expected.status != Status.IN_FLIGHT:
            assert stored.lease_expires_at is None

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


async def run_contract_machine(
    storage: Storage, *, max_examples: int = 25, steps: int = 30
) -> None:
    """Run :class:`ContractMachine` against ``storage`` (on the running loop); raise the
    first contract violation Hypothesis finds, shrunk to a short sequence of steps."""
    loop = asyncio.get_running_loop()
    machine = ContractMachine.bound(storage, loop)
    config = settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    await asyncio.to_thread(run_state_machine_as_test, machine, settings=config)
