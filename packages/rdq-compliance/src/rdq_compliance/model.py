"""A small pure-Python model of the storage contract, for the stateful test.

It knows what each operation must return and how each task's state must change, given what
the store reported (due times and lease expiries come from the store). It is deliberately
naive: one dict of tasks and a handful of rules, easy to check against the docstrings of
:class:`rdq.spi.Storage`.

Lapsed leases make one answer depend on the store's clock at the moment of a claim, which
the model knows only between two readings (``now()`` before and after the call): a lease
that expired before the first reading must be reclaimable, one that expires after the
second must not be, and one in between may go either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rdq.spi import Attempt, DLQFilter, Envelope, Outcome, Status
from rdq_compliance._flow_model import FlowModel

__all__ = ["ContractModel", "ModelTask", "exported", "modelled"]

Key = tuple[int, datetime, str]
"""Claim order: (-priority, due at, id)."""


@dataclass
class ModelTask:
    """What the contract says a task looks like now."""

    id: str
    queue: str
    handler_ref: str
    priority: int = 0
    status: Status = Status.PENDING
    due_at: datetime | None = None
    """When a PENDING task is due by the storage clock (None: far in the future)."""
    lease_expires_at: datetime | None = None
    claimed_by: str | None = None
    claimed_at: datetime | None = None
    attempt_count: int = 0
    redrive_count: int = 0
    outcomes: list[Outcome] = field(default_factory=list)
    last_error_type: str | None = None
    token: str | None = None
    """The current token (None for an IN_FLIGHT task imported without one)."""
    old_tokens: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)

    def key(self) -> Key:
        due = self.due_at if self.status == Status.PENDING else self.lease_expires_at
        assert due is not None
        return (-self.priority, due, self.id)


class ContractModel:
    """The expected state of every task the stateful test created."""

    def __init__(self) -> None:
        self.tasks: dict[str, ModelTask] = {}
        self.flow = FlowModel()
        """The control records (contract version 3), for a store with ``control``."""

    # --- admission -------------------------------------------------------------------------

    def admit(self, task: ModelTask) -> bool | str:
        """True if stored, False if already in its queue, else the queue that owns the id."""
        existing = self.tasks.get(task.id)
        if existing is None:
            self.tasks[task.id] = task
            return True
        return False if existing.queue == task.queue else existing.queue

    # --- claiming --------------------------------------------------------------------------

    def due(self, queue: str, before: datetime, after: datetime) -> tuple[set[str], set[str]]:
        """(surely due, maybe due) ids of ``queue`` for a claim whose clock reading lies
        between ``before`` and ``after``."""
        sure: set[str] = set()
        maybe: set[str] = set()
        for t in self.tasks.values():
            if t.queue != queue:
                continue
            if t.status == Status.PENDING and t.due_at is not None and t.due_at <= before:
                sure.add(t.id)
            elif t.status == Status.IN_FLIGHT and t.lease_expires_at is not None:
                if t.lease_expires_at <= before:
                    sure.add(t.id)
                elif t.lease_expires_at <= after:
                    maybe.add(t.id)
        return sure, maybe

    def claim_order(self, queue: str, at: datetime) -> list[ModelTask]:
        """The tasks of ``queue`` surely due at ``at``, most urgent first (ties by id)."""
        sure, _ = self.due(queue, at, at)
        return sorted((self.tasks[i] for i in sure), key=ModelTask.key)

    def claim_order_favouring(self, queue: str, at: datetime, claimed: set[str]) -> list[ModelTask]:
        """The claim order of the tasks surely due at ``at``, each tie broken in favour of the
        tasks in ``claimed``: the contract leaves the order of tied tasks to the store, and a
        claim through controls took a valid batch exactly when taking the tasks in this order
        gives it (what a tie's claimed tasks take from the limits is the same in any order)."""
        sure, _ = self.due(queue, at, at)
        return sorted(
            (self.tasks[i] for i in sure),
            key=lambda t: (t.key()[:2], t.id not in claimed, t.id),
        )

    def whole_ties(self, queue: str, at: datetime, limit: int) -> int:
        """``limit``, raised until the tasks due at ``at`` that it takes end where the claim
        order does not tie: the contract leaves the order of tied tasks to the store, so a
        batch that ends inside a tie may take any of them, and the machine must know which
        tasks a claim takes."""
        keys = [t.key()[:2] for t in self.claim_order(queue, at)]
        while 0 < limit < len(keys) and keys[limit - 1] == keys[limit]:
            limit += 1
        return limit

    def claim_problems(
        self, queue: str, limit: int, claimed: set[str], before: datetime, after: datetime
    ) -> list[str]:
        """What is wrong with ``claimed`` as the answer to ``claim_due(queue, limit)``."""
        sure, maybe = self.due(queue, before, after)
        problems = []
        strangers = sorted(claimed - sure - maybe)
        if strangers:
            problems.append(f"claimed tasks that were not due: {strangers}")
        if len(claimed) > limit:
            problems.append(f"claimed {len(claimed)} tasks with limit {limit}")
        taken_maybe = [self.tasks[i].key()[1] for i in claimed & maybe]
        # a lapsed lease the store found due means every earlier-lapsed one was due as well
        horizon = max(taken_maybe) if taken_maybe else None
        due = sure | {i for i in maybe if horizon and self.tasks[i].key()[1] <= horizon}
        if len(claimed) < limit:
            missed = sorted(sure - claimed)
            if missed:
                problems.append(f"due tasks left behind with room in the batch: {missed}")
        elif claimed and not strangers:
            last = max(self.tasks[i].key()[:2] for i in claimed)
            skipped = sorted(i for i in due - claimed if self.tasks[i].key()[:2] < last)
            if skipped:
                problems.append(f"claimed past more urgent due tasks: {skipped}")
        return problems

    def with_status(self, status: Status) -> list[ModelTask]:
        return [t for t in self.tasks.values() if t.status == status]

    def claimed(
        self, task_id: str, token: str, expires: datetime, by: str | None, at: datetime
    ) -> bool:
        """Record a claim; True if it was the reclaim of a lapsed lease."""
        task = self.tasks[task_id]
        reclaim = task.status == Status.IN_FLIGHT
        if reclaim:
            task.outcomes.append(Outcome.LEASE_EXPIRED)
            task.attempt_count += 1
            task.last_error_type = "LeaseExpired"
            if task.token is not None:
                task.old_tokens.append(task.token)
        task.status = Status.IN_FLIGHT
        task.token = token
        task.due_at = None
        task.lease_expires_at = expires
        task.claimed_by, task.claimed_at = by, at
        return reclaim

    def holds(self, task_id: str, token: str) -> bool:
        """Whether ``token`` is the current token of the IN_FLIGHT task ``task_id`` (a lease
        that lapsed but was not reclaimed is still held)."""
        task = self.tasks[task_id]
        return task.status == Status.IN_FLIGHT and task.token == token

    # --- resolution ------------------------------------------------------------------------

    def resolve(
        self,
        task_id: str,
        status: Status,
        outcome: Outcome,
        error_type: str | None,
        due_at: datetime | None = None,
    ) -> None:
        task = self.tasks[task_id]
        task.outcomes.append(outcome)
        task.attempt_count += 1
        task.last_error_type = error_type
        task.status = status
        task.due_at = due_at
        self._release(task)

    def cancelled(self, queue: str, ids: list[str]) -> list[ModelTask]:
        """Cancel the listed PENDING / IN_FLIGHT tasks of ``queue``; return them."""
        out = []
        for task_id in dict.fromkeys(ids):
            task = self.tasks.get(task_id)
            if task and task.queue == queue and task.status in (Status.PENDING, Status.IN_FLIGHT):
                task.status = Status.CANCELLED
                task.due_at = None
                self._release(task)
                out.append(task)
        return out

    @staticmethod
    def _release(task: ModelTask) -> None:
        if task.token is not None:
            task.old_tokens.append(task.token)
        task.token = None
        task.lease_expires_at = None
        task.claimed_by = task.claimed_at = None

    # --- DLQ -------------------------------------------------------------------------------

    def dead(self, queue: str, dlq_filter: DLQFilter | None = None) -> list[ModelTask]:
        return [
            t
            for t in self.tasks.values()
            if t.queue == queue
            and t.status == Status.DEAD
            and (dlq_filter is None or _matches(dlq_filter, t))
        ]

    def select(
        self, queue: str, ids: list[str] | None, dlq_filter: DLQFilter | None, *, purge: bool
    ) -> list[ModelTask]:
        """What a redrive (or purge) selects: by ids, DEAD tasks (and, for a purge,
        CANCELLED ones) of the queue; by filter, the DEAD ones that match."""
        if ids is None:
            return self.dead(queue, dlq_filter)
        wanted = (Status.DEAD, Status.CANCELLED) if purge else (Status.DEAD,)
        return [
            t
            for t in self.tasks.values()
            if t.queue == queue and t.status in wanted and t.id in set(ids)
        ]

    def redriven(self, task_id: str, due_at: datetime) -> None:
        task = self.tasks[task_id]
        task.status = Status.PENDING
        task.attempt_count = 0
        task.redrive_count += 1
        task.due_at = due_at

    def purged(self, task_id: str) -> None:
        del self.tasks[task_id]

    def finished(self, queue: str) -> list[ModelTask]:
        """SUCCEEDED and CANCELLED tasks of ``queue`` (what ``purge_succeeded`` may drop)."""
        return [
            t
            for t in self.tasks.values()
            if t.queue == queue and t.status in (Status.SUCCEEDED, Status.CANCELLED)
        ]

    def counts(self, queue: str) -> tuple[int, int, int, int, int]:
        """(pending, in_flight, dlq_depth, succeeded, cancelled) of ``queue``."""
        mine = [t for t in self.tasks.values() if t.queue == queue]
        return (
            sum(t.status == Status.PENDING for t in mine),
            sum(t.status == Status.IN_FLIGHT for t in mine),
            sum(t.status == Status.DEAD for t in mine),
            sum(t.status == Status.SUCCEEDED for t in mine),
            sum(t.status == Status.CANCELLED for t in mine),
        )


def _matches(dlq_filter: DLQFilter, task: ModelTask) -> bool:
    if dlq_filter.handler_ref is not None and task.handler_ref != dlq_filter.handler_ref:
        return False
    return dlq_filter.error_type is None or task.last_error_type == dlq_filter.error_type


def exported(
    task_id: str,
    queue: str,
    status: Status,
    *,
    handler_ref: str,
    error_type: str,
    priority: int,
    due: datetime,
    past: datetime,
    keys: list[str] | None = None,
) -> Envelope:
    """A task as another store would export it, in ``status``: one failed attempt, created a
    day before ``past``; a PENDING one due at ``due``, an IN_FLIGHT one whose lease ends at
    ``due`` (held by ``sm-exporter``), the others finished at ``past``."""
    task = Envelope(
        id=task_id,
        queue=queue,
        handler_ref=handler_ref,
        payload={"imported": True},
        status=status,
        priority=priority,
        attempts=[Attempt(number=1, outcome=Outcome.FAILED, error_type=error_type)],
        attempt_count=1,
        keys=list(keys or []),
        created_at=past - timedelta(days=1),
        next_attempt_at=due if status == Status.PENDING else past,
    )
    if status == Status.IN_FLIGHT:
        task.lease_expires_at = due
        task.claimed_by, task.claimed_at = "sm-exporter", past - timedelta(hours=1)
    elif status == Status.SUCCEEDED:
        task.completed_at = past
    elif status == Status.DEAD:
        task.dead_lettered_at = past
    elif status == Status.CANCELLED:
        task.cancelled_at = past
    return task


def modelled(task: Envelope, never: datetime) -> ModelTask:
    """What the model expects of an imported ``task`` (``never``: a due time no example
    reaches)."""
    pending_due = task.next_attempt_at if task.next_attempt_at != never else None
    return ModelTask(
        task.id,
        task.queue,
        task.handler_ref,
        task.priority,
        status=task.status,
        due_at=pending_due if task.status == Status.PENDING else None,
        lease_expires_at=task.lease_expires_at,
        claimed_by=task.claimed_by,
        claimed_at=task.claimed_at,
        attempt_count=task.attempt_count,
        outcomes=[a.outcome for a in task.attempts],
        last_error_type=task.attempts[-1].error_type if task.attempts else None,
        keys=list(task.keys),
    )
