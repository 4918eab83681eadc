"""The Hypothesis state machine: random operation sequences checked against
:class:`~rdq_compliance.model.ContractModel`.

Hypothesis drives rules synchronously, while a store lives on an event loop. The machine runs
in a worker thread and submits each operation to the store's own loop with
:func:`asyncio.run_coroutine_threadsafe`, so any backend (connection pools bound to a loop
included) can be driven. Use :func:`run_contract_machine` from an async test.

Claims use a long or a short lease, so lapsed leases, their reclaims and their holders'
still-current tokens all appear in random sequences; tasks carry priorities; operators
cancel and import tasks in any status. With ``control``, tasks carry keys, and operators
pause and resume, open, probe and close breakers, set, change and clear limits, gates and
rates, delete records and retry waiting tasks now (:mod:`rdq_compliance._flow_machine`), so
every claim and extension goes through controls that change under it.

Replays are exact. Hypothesis replays a failing sequence to shrink and report it, and a step
whose effect hung on timing would pass on one run and fail on the next (``Flaky``). So
nothing the machine does depends on the speed of the machine or the store: a short lease is
waited out (by the storage clock) as soon as it is granted and a long one outlives every
example, so which leases have lapsed is a property of the sequence; a claim's batch never
ends inside a tie of the claim order (which the contract leaves to the store); the pickers
draw plain indexes, resolved to tasks from the model alone.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule, run_state_machine_as_test

from rdq.errors import IDConflict, NotFound
from rdq.spi import (
    Attempt,
    DLQFilter,
    Envelope,
    Outcome,
    Page,
    Selector,
    Status,
    Storage,
    TaskFilter,
    status_time,
)
from rdq_compliance._flow_machine import FlowRules
from rdq_compliance._machine_base import SLOTS, queue_indexes, slots
from rdq_compliance._support import LONG_LEASE
from rdq_compliance.model import ModelTask, exported, modelled

__all__ = ["ContractMachine", "run_contract_machine"]

ERROR_TYPES = ("KitError", "OtherError")
HANDLERS = ("kit.handlers:even", "kit.handlers:odd")
SHORT = timedelta(milliseconds=5)
"""The machine's short lease: waited out as soon as it is granted (by the storage clock)."""

#: The operations one step may run, repeated to weight them (the first ones shrink best).
OPERATIONS = (
    "get",
    "enqueue-any",
    "enqueue-any",
    "claim",
    "claim",
    "claim",
    "resolve",
    "resolve",
    "resolve",
    "resolve",
    "extend-lease",
    "extend-lease",
    "redrive",
    "purge",
    "purge-succeeded",
    "cancel",
    "import-any",
    "list-tasks",
    "control-any",
    "control-any",
    "control-any",
    "retry-now-any",
    "redrive",
)
RESOLUTIONS = st.sampled_from(["complete", "retry-now", "retry-later", "dead-letter"])
FILTERS = (
    DLQFilter(),
    DLQFilter(error_type=ERROR_TYPES[0]),
    DLQFilter(handler_ref=HANDLERS[1]),
    DLQFilter(error_type=ERROR_TYPES[1], handler_ref=HANDLERS[0]),
)

priorities = st.sampled_from([-10, -1, 0, 0, 1, 10])
leases = st.sampled_from([LONG_LEASE, SHORT])
workers = st.sampled_from([None, "sm-w1", "sm-w2"])
#: which token a fenced call presents: the current one, an earlier one, or a made-up one
token_choices = st.sampled_from(["current", "current", "old", "made-up"])


class ContractMachine(FlowRules):
    """Random sequences of every operation against one store, checked step by step.

    Bind it to a store with :meth:`bound` (each example then uses fresh queue names and
    ids, so examples never see each other's tasks). The model, the pickers and the checks
    are those of :class:`~rdq_compliance._machine_base.ContractMachineBase`."""

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
                "control": storage.capabilities().control,
            },
        )

    @initialize(seed=st.lists(st.tuples(slots, queue_indexes), min_size=1, max_size=SLOTS))
    def start_with_due_tasks(self, seed: list[tuple[int, int]]) -> None:
        for slot, queue in seed:
            self.enqueue(slot, queue, delayed=False, priority=0)

    @initialize(data=st.data())
    def start_with_a_limit(self, data: st.DataObject) -> None:
        """Often, a concurrency limit of 1 on a task key from the start (with ``control``),
        so that claims and extensions meet one early."""
        self.limit_from_start(data)

    @rule(data=st.data(), operation=st.sampled_from(OPERATIONS))
    def step(self, data: st.DataObject, operation: str) -> None:
        """One operation, drawn with weights (every operation stays possible in every
        example, which Hypothesis' per-rule swarm testing would not guarantee)."""
        getattr(self, operation.replace("-", "_"))(data)

    # --- admission -------------------------------------------------------------------------

    def enqueue_any(self, data: st.DataObject) -> None:
        self.enqueue(
            data.draw(slots, label="slot"),
            data.draw(queue_indexes, label="queue"),
            delayed=data.draw(st.booleans(), label="delayed"),
            priority=data.draw(priorities, label="priority"),
        )

    def enqueue(self, slot: int, queue: int, *, delayed: bool, priority: int) -> None:
        task_id = self.task_id(slot)
        task = Envelope(
            id=task_id,
            queue=self.queues[queue],
            handler_ref=HANDLERS[slot % 2],
            payload={"slot": slot, "queue": queue},
            priority=priority,
            next_attempt_at=self.future if delayed else None,
            keys=self.keys_of(slot),
        )
        expected = self.model.admit(
            ModelTask(task_id, task.queue, task.handler_ref, priority, keys=list(task.keys))
        )
        if isinstance(expected, str):
            conflict = self.expect(IDConflict, self.storage.enqueue(task))
            assert conflict.existing_queue == expected
            return
        assert self.call(self.storage.enqueue(task)) is expected
        if expected:
            stored = self.stored(task_id)
            assert stored.status == Status.PENDING
            self.model.tasks[task_id].due_at = None if delayed else stored.next_attempt_at

    def import_any(self, data: st.DataObject) -> None:
        slot = data.draw(slots, label="slot")
        queue = self.queues[data.draw(queue_indexes, label="queue")]
        status = data.draw(st.sampled_from(list(Status)), label="status")
        later = data.draw(st.booleans(), label="later")
        task = exported(
            self.task_id(slot),
            queue,
            status,
            handler_ref=HANDLERS[slot % 2],
            error_type=ERROR_TYPES[slot % 2],
            priority=data.draw(priorities, label="priority"),
            due=self.future if later else self.past,
            past=self.past,
            keys=self.keys_of(slot),
        )
        expected = self.model.admit(modelled(task, self.future))
        if isinstance(expected, str):
            conflict = self.expect(IDConflict, self.storage.import_tasks([task]))
            assert conflict.existing_queue == expected
            return
        assert self.call(self.storage.import_tasks([task])) == [expected]
        if expected:
            self.check_task(task.id)

    # --- claiming --------------------------------------------------------------------------

    def claim(self, data: st.DataObject) -> None:
        queue = self.pick_queue(data, Status.PENDING, Status.IN_FLIGHT)
        limit = data.draw(st.integers(min_value=1, max_value=4), label="limit")
        lease = data.draw(leases, label="lease")
        worker = data.draw(workers, label="worker")
        name = self.queues[queue]
        before = self.now()
        limit = self.model.whole_ties(name, before, limit)
        due = sorted(t.id for t in self.model.claim_order(name, before)[:limit])
        claimed = self.call(self.storage.claim_due(name, limit, lease, worker_id=worker))
        after = self.now()
        tokens = {c.task.id: c.token for c in claimed}
        assert len(tokens) == len(claimed), "claim_due returned a task twice"
        if self.control and self.model.flow.restricting(name):
            self.check_controlled_claim(name, limit, set(tokens), before, after)
        else:
            problems = self.model.claim_problems(name, limit, set(tokens), before, after)
            assert not problems, "; ".join(problems)
            if not self.model.due(name, before, after)[1]:  # no lease ended during the call
                assert sorted(tokens) == due, f"claimed {sorted(tokens)}, the model says {due}"
        for c in claimed:
            expected = self.model.tasks[c.task.id]
            was = (expected.attempt_count, expected.claimed_by, expected.claimed_at)
            assert c.token not in expected.old_tokens, "a token was handed out twice"
            assert c.token != expected.token, "a reclaim must mint a new token"
            got = c.task
            assert got.status == Status.IN_FLIGHT
            assert got.claimed_by == worker
            assert got.lease_expires_at is not None and got.claimed_at is not None
            assert got.claimed_at == got.lease_expires_at - lease
            assert before <= got.claimed_at <= after, "claimed_at is the store's now"
            if self.model.claimed(got.id, c.token, got.lease_expires_at, worker, got.claimed_at):
                record = got.attempts[-1]
                assert record.outcome == Outcome.LEASE_EXPIRED
                assert record.number == was[0] + 1
                assert (record.worker_id, record.started_at) == (was[1], was[2])
                assert record.finished_at == got.claimed_at
            assert got.attempt_count == expected.attempt_count
            assert got.redrive_count == expected.redrive_count
            assert got.priority == expected.priority
        if lease == SHORT:
            self.wait_out(c.task.lease_expires_at for c in claimed)

    def check_controlled_claim(
        self, name: str, limit: int, claimed: set[str], before: datetime, after: datetime
    ) -> None:
        """A claim of a queue that controls restrict took exactly what the model's claim
        through them takes (ties broken as the store broke them), and took from the gates and
        buckets what it says."""
        sure, maybe = self.model.due(name, before, after)
        strangers = sorted(claimed - sure - maybe)
        assert not strangers, f"claimed tasks that were not due: {strangers}"
        if maybe:  # a lease ended during the call: the store's instant is unknown
            return
        order = self.model.claim_order_favouring(name, before, claimed)
        plan = self.model.flow.plan(name, order, limit, self.model.tasks.values(), self.lapsed_by)
        assert sorted(plan.ids) == sorted(claimed), (
            f"claimed {sorted(claimed)} through the controls, the model says {sorted(plan.ids)}"
        )
        self.model.flow.commit(name, plan)

    def extend_lease(self, data: st.DataObject) -> None:
        task_id = self.task_id(self.pick_extended(data))
        token = self.pick_token(task_id, data.draw(token_choices, label="token"))
        lease = data.draw(leases, label="lease")
        operation = self.storage.extend_lease(task_id, token, lease)
        if task_id not in self.model.tasks:
            self.expect(NotFound, operation)
        elif not self.model.holds(task_id, token) or self.slot_taken(task_id):
            self.expect_fenced(task_id, operation)
        else:
            before = self.now()
            expires = self.call(operation)
            after = self.now()
            assert before + lease <= expires <= after + lease, "extend sets now + lease"
            self.model.tasks[task_id].lease_expires_at = expires
            self.check_task(task_id)
            if lease == SHORT:
                self.wait_out([expires])

    # --- resolution ------------------------------------------------------------------------

    def resolve(self, data: st.DataObject) -> None:
        task_id = self.task_id(self.pick_held(data))
        token = self.pick_token(task_id, data.draw(token_choices, label="token"))
        how = data.draw(RESOLUTIONS, label="how")
        error = data.draw(st.sampled_from(ERROR_TYPES), label="error_type")
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

    def cancel(self, data: st.DataObject) -> None:
        name = self.queues[self.pick_queue(data, Status.PENDING, Status.IN_FLIGHT)]
        size = data.draw(st.integers(min_value=1, max_value=3), label="size")
        live = (Status.PENDING, Status.IN_FLIGHT)
        ids = [self.task_id(self.pick_slot(data, *live)) for _ in range(size)]
        count = self.call(self.storage.cancel(name, ids))
        cancelled = self.model.cancelled(name, ids)
        assert count == len(cancelled), f"cancel counted {count}, the model {len(cancelled)}"
        for task in cancelled:
            self.check_task(task.id)

    # --- DLQ -------------------------------------------------------------------------------

    def selection(
        self, data: st.DataObject, *statuses: Status
    ) -> tuple[list[str] | None, DLQFilter | None, Selector]:
        if self.filter_pushdown and data.draw(st.booleans(), label="by filter"):
            dlq_filter = data.draw(st.sampled_from(FILTERS), label="filter")
            return None, dlq_filter, Selector.by_filter(dlq_filter)
        size = data.draw(st.integers(min_value=0, max_value=3), label="size")
        ids = [self.task_id(self.pick_slot(data, *statuses)) for _ in range(size)]
        return ids, None, Selector.by_ids(*ids) if ids else Selector.by_ids("sm-nobody")

    def redrive(self, data: st.DataObject) -> None:
        name = self.queues[self.pick_queue(data, Status.DEAD)]
        ids, dlq_filter, selector = self.selection(data, Status.DEAD)
        expected = self.model.select(name, ids, dlq_filter, purge=False)
        assert self.call(self.storage.redrive(name, selector)) == len(expected)
        for task in expected:
            stored = self.stored(task.id)
            assert stored.next_attempt_at is not None
            self.model.redriven(task.id, stored.next_attempt_at)
            self.check_task(task.id)

    def purge(self, data: st.DataObject) -> None:
        name = self.queues[self.pick_queue(data, Status.DEAD, Status.CANCELLED)]
        ids, dlq_filter, selector = self.selection(data, Status.DEAD, Status.CANCELLED)
        expected = self.model.select(name, ids, dlq_filter, purge=True)
        assert self.call(self.storage.purge(name, selector)) == len(expected)
        for task in expected:
            self.model.purged(task.id)
            self.expect(NotFound, self.storage.get(task.id))

    # --- operations ------------------------------------------------------------------------

    def get(self, data: st.DataObject) -> None:
        task_id = self.task_id(data.draw(slots, label="slot"))
        if task_id in self.model.tasks:
            self.check_task(task_id)
        else:
            self.expect(NotFound, self.storage.get(task_id))

    def list_tasks(self, data: st.DataObject) -> None:
        name = self.queues[data.draw(queue_indexes, label="queue")]
        status = data.draw(st.sampled_from(list(Status)), label="status")
        listed: list[Envelope] = []
        cursor: str | None = None
        for _ in range(SLOTS + 1):
            page = Page(limit=2, cursor=cursor)
            tasks, cursor = self.call(
                self.storage.list_tasks(name, TaskFilter(status=status), page)
            )
            listed += tasks
            if cursor is None:
                break
        expected = {t.id for t in self.model.with_status(status) if t.queue == name}
        assert [t.id for t in listed if t.status == status] == [t.id for t in listed]
        assert sorted(t.id for t in listed) == sorted(expected), f"list_tasks({status})"
        keys = [(status_time(t), t.id) for t in listed]
        assert keys == sorted(keys), "list_tasks orders by status time, then id"

    def purge_succeeded(self, data: st.DataObject) -> None:
        name = self.queues[data.draw(queue_indexes, label="queue")]
        everything = data.draw(st.booleans(), label="everything")
        cutoff = self.future if everything else self.past - timedelta(days=1)
        expected = self.model.finished(name) if everything else []
        assert self.call(self.storage.purge_succeeded(name, cutoff)) == len(expected)
        for task in expected:
            self.model.purged(task.id)

    # --- checks ----------------------------------------------------------------------------

    @invariant()
    def counts_and_dlq_match_the_model(self) -> None:
        for name in self.queues:
            stats = self.call(self.storage.stats(name))
            counts = (
                stats.pending,
                stats.in_flight,
                stats.dlq_depth,
                stats.succeeded,
                stats.cancelled,
            )
            expected = self.model.counts(name)
            assert counts == expected, f"stats of {name}: {counts}, the model says {expected}"
            listed, cursor = self.call(self.storage.dlq_list(name, None, Page(limit=100)))
            assert cursor is None, "a DLQ that fits one page has no next cursor"
            assert sorted(t.id for t in listed) == sorted(t.id for t in self.model.dead(name))
            assert all(t.attempts == [] for t in listed), "dlq_list omits attempts by default"
        self.check_controls()


async def run_contract_machine(
    storage: Storage,
    *,
    max_examples: int = 25,
    steps: int = 30,
    derandomize: bool = False,
    shrink: bool = True,
) -> None:
    """Run :class:`ContractMachine` against ``storage`` (on the running loop); raise the
    first contract violation Hypothesis finds, shrunk to a short sequence of steps.

    ``derandomize`` makes every run explore the same sequences (reproducible CI);
    ``shrink=False`` reports the first failing sequence as found (faster on slow stores)."""
    loop = asyncio.get_running_loop()
    machine = ContractMachine.bound(storage, loop)
    config = settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=derandomize,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, *([Phase.shrink] if shrink else [])],
        suppress_health_check=list(HealthCheck),
    )
    await asyncio.to_thread(run_state_machine_as_test, machine, settings=config)
