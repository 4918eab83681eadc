"""What an action would act on, said before it runs: how many tasks, which of the named ids it
cannot act on and why (not found, in another queue, not in a status the action takes), and,
when a filter matches nothing, what the queue holds that is close to it (an error type one
letter off, an empty DLQ) — so that an empty answer is the truth, never a silent "0".
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec

from rdq._suggest import close_match
from rdq.audit import Action
from rdq.errors import NotFound
from rdq.spi import DLQFilter, DLQGroup, Envelope, Status, Storage, TaskFilter

__all__ = ["WANTED", "Preview", "Skipped", "dlq_hint", "sort_ids", "task_hint"]

WANTED: dict[str, tuple[Status, ...]] = {
    "redrive": (Status.DEAD,),
    "purge": (Status.DEAD, Status.CANCELLED),
    "cancel": (Status.PENDING, Status.IN_FLIGHT),
    "retry_now": (Status.PENDING,),
}
"""The statuses each action takes a named task in."""


class Skipped(msgspec.Struct, kw_only=True, frozen=True):
    """A named task an action does not act on, and why."""

    id: str
    reason: str
    """``not_found``, ``other_queue`` (it is in ``queue``), ``status`` (it is ``status``, not
    one of ``wanted``) or ``due`` (a retry now of a task that is due already)."""
    queue: str | None = None
    status: str | None = None
    wanted: str | None = None

    @property
    def text(self) -> str:
        """``not found``, ``in queue emails``, ``not DEAD (PENDING)``, ``due already``."""
        if self.reason == "not_found":
            return "not found"
        if self.reason == "other_queue":
            return f"in queue {self.queue}"
        if self.reason == "due":
            return "due already (nothing to retry now)"
        return f"not {self.wanted} ({self.status})"


class Preview(msgspec.Struct, kw_only=True, frozen=True):
    """What an action selects now: ``count`` tasks; the named ids it ``skipped``; a ``hint``
    when nothing matches a filter."""

    count: int
    skipped: list[Skipped] = []
    hint: str | None = None


async def sort_ids(
    storage: Storage, action: Action, queue: str, ids: Sequence[str], now: datetime | None
) -> tuple[list[str], list[Skipped]]:
    """The named ids ``action`` would act on in ``queue``, and the others with why (one read
    per id; ``now``, the store's, is needed for a retry now only)."""
    wanted = WANTED[action]
    taken: list[str] = []
    skipped: list[Skipped] = []
    for task_id in dict.fromkeys(ids):
        try:
            task = await storage.get(task_id)
        except NotFound:
            skipped.append(Skipped(id=task_id, reason="not_found"))
            continue
        why = _why_not(task, action, queue, wanted, now)
        if why is None:
            taken.append(task_id)
        else:
            skipped.append(why)
    return taken, skipped


def _why_not(
    task: Envelope, action: Action, queue: str, wanted: tuple[Status, ...], now: datetime | None
) -> Skipped | None:
    if task.queue != queue:
        return Skipped(id=task.id, reason="other_queue", queue=task.queue)
    if task.status not in wanted:
        names = " or ".join(s.value for s in wanted)
        return Skipped(id=task.id, reason="status", status=task.status.value, wanted=names)
    due = task.next_attempt_at is None or (now is not None and task.next_attempt_at <= now)
    if action == "retry_now" and due:
        return Skipped(id=task.id, reason="due", status=task.status.value)
    return None


def dlq_hint(queue: str, groups: Sequence[DLQGroup], chosen: DLQFilter | None) -> str:
    """Why a filter of the DLQ of ``queue`` (by its ``groups``) matches nothing, and what is
    close to it."""
    total = sum(g.count for g in groups)
    if not total:
        return f"the DLQ of {queue} is empty"
    chosen = chosen or DLQFilter()
    parts = [
        _field_hint("error type", chosen.error_type, _counts(groups, "error_type")),
        _field_hint("handler_ref", chosen.handler_ref, _counts(groups, "handler")),
    ]
    said = [p for p in parts if p]
    if said:
        return "; ".join(said)
    return (
        f"none of the {total} dead task(s) of {queue} matches the filter as a whole (its time "
        f"range, or its fields together): rdq dlq groups {queue} shows what it holds"
    )


def task_hint(
    queue: str, chosen: TaskFilter, handlers: Sequence[str], status_count: int | None
) -> str:
    """Why a filter of the tasks of ``queue`` in one status matches nothing."""
    status = chosen.status.value
    if status_count == 0:
        return f"queue {queue} has no {status} task"
    if chosen.handler_ref is not None and chosen.handler_ref not in handlers:
        match = close_match(chosen.handler_ref, handlers)
        guess = f" (did you mean {match!r}?)" if match else ""
        return f"no {status} task of {queue} has handler_ref {chosen.handler_ref!r}{guess}"
    return f"none of the {status} tasks of {queue} matches the filter"


def _counts(groups: Sequence[DLQGroup], what: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for group in groups:
        name = group.error_type if what == "error_type" else group.handler_ref
        if name is not None:
            counts[name] = counts.get(name, 0) + group.count
    return counts


def _field_hint(label: str, value: str | None, counts: dict[str, int]) -> str:
    if value is None or value in counts:
        return ""
    match = close_match(value, counts)
    if match is not None:
        return (
            f"no dead task has {label} {value!r} (did you mean {match!r}? {counts[match]} task(s))"
        )
    largest = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    listed = ", ".join(f"{name} ({n})" for name, n in largest)
    return f"no dead task has {label} {value!r}; the DLQ holds: {listed}"
