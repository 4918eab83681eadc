"""A small pure-Python model of the storage contract, for the stateful test.

It knows what each operation must return and how each task's state must change, given what
the store reported (due times come from the store). It is deliberately naive: one dict of
tasks and a handful of rules, easy to check against the docstrings of :class:`rdq.spi.Storage`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from rdq.spi import DLQFilter, Outcome, Status

__all__ = ["ContractModel", "ModelTask"]


@dataclass
class ModelTask:
    """What the contract says a task looks like now."""

    id: str
    queue: str
    handler_ref: str
    status: Status = Status.PENDING
    due_at: datetime | None = None
    """When a PENDING task is due by the storage clock (None: far in the future)."""
    attempt_count: int = 0
    redrive_count: int = 0
    outcomes: list[Outcome] = field(default_factory=list)
    last_error_type: str | None = None
    token: str | None = None
    old_tokens: list[str] = field(default_factory=list)

    def is_due(self) -> bool:
        return self.status == Status.PENDING and self.due_at is not None


class ContractModel:
    """The expected state of every task the stateful test created."""

    def __init__(self) -> None:
        self.tasks: dict[str, ModelTask] = {}

    # --- admission -------------------------------------------------------------------------

    def enqueue(self, task_id: str, queue: str, handler_ref: str) -> bool | str:
        """True if stored, False if already in ``queue``, else the queue that owns the id."""
        existing = self.tasks.get(task_id)
        if existing is None:
            self.tasks[task_id] = ModelTask(task_id, queue, handler_ref)
            return True
        return False if existing.queue == queue else existing.queue

    # --- claiming --------------------------------------------------------------------------

    def due(self, queue: str) -> list[ModelTask]:
        return [t for t in self.tasks.values() if t.queue == queue and t.is_due()]

    def claim_problems(self, queue: str, limit: int, claimed: dict[str, str]) -> list[str]:
        """What is wrong with ``claimed`` (id -> token) as the answer to ``claim_due``."""
        due = {t.id: t for t in self.due(queue)}
        problems = []
        if len(claimed) != min(limit, len(due)):
            problems.append(f"claimed {len(claimed)} of {len(due)} due tasks with limit {limit}")
        strangers = sorted(set(claimed) - set(due))
        if strangers:
            problems.append(f"claimed tasks that were not due: {strangers}")
        left = [t.due_at for i, t in due.items() if i not in claimed and t.due_at is not None]
        taken = [t.due_at for i, t in due.items() if i in claimed and t.due_at is not None]
        if left and taken and max(taken) > min(left):
            problems.append("a later-due task was claimed before an earlier-due one")
        return problems

    def with_status(self, status: Status) -> list[ModelTask]:
        return [t for t in self.tasks.values() if t.status == status]

    def claimed(self, task_id: str, token: str) -> None:
        task = self.tasks[task_id]
        task.status = Status.IN_FLIGHT
        task.token = token
        task.due_at = None

    def holds(self, task_id: str, token: str) -> bool:
        """Whether ``token`` is the current token of the IN_FLIGHT task ``task_id``."""
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
        if task.token is not None:
            task.old_tokens.append(task.token)
        task.token = None

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
        self, queue: str, ids: list[str] | None, dlq_filter: DLQFilter | None
    ) -> list[ModelTask]:
        dead = self.dead(queue, dlq_filter)
        if ids is None:
            return dead
        return [t for t in dead if t.id in set(ids)]

    def redriven(self, task_id: str, due_at: datetime) -> None:
        task = self.tasks[task_id]
        task.status = Status.PENDING
        task.attempt_count = 0
        task.redrive_count += 1
        task.due_at = due_at

    def purged(self, task_id: str) -> None:
        del self.tasks[task_id]

    def succeeded(self, queue: str) -> list[ModelTask]:
        return [t for t in self.tasks.values() if t.queue == queue and t.status == Status.SUCCEEDED]

    def counts(self, queue: str) -> tuple[int, int, int, int]:
        """(pending, in_flight, dlq_depth, succeeded) of ``queue``."""
        mine = [t for t in self.tasks.values() if t.queue == queue]
        return (
            sum(t.status == Status.PENDING for t in mine),
            sum(t.status == Status.IN_FLIGHT for t in mine),
            sum(t.status == Status.DEAD for t in mine),
            sum(t.status == Status.SUCCEEDED for t in mine),
        )


def _matches(dlq_filter: DLQFilter, task: ModelTask) -> bool:
    if dlq_filter.handler_ref is not None and task.handler_ref != dlq_filter.handler_ref:
        return False
    return dlq_filter.error_type is None or task.last_error_type == dlq_filter.error_type
