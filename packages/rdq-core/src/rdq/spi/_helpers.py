"""Small pieces most stores need: the group order, keyset paging, the fencing answer, and
de-duplicating a batch by id."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from rdq.errors import IDConflict, NotFound, StaleClaim
from rdq.spi._models import DLQGroup, Envelope

__all__ = ["fence", "first_of_each_id", "group_order", "page_of", "stored_flags"]

R = TypeVar("R")
T = TypeVar("T")


def group_order(group: DLQGroup) -> tuple[int, str, bool, str]:
    """The order ``dlq_groups`` returns groups in: largest first, then by handler_ref, then
    error_type with ``None`` last (strings compared by code point, as Python compares them)."""
    return (-group.count, group.handler_ref, group.error_type is None, group.error_type or "")


def page_of(
    rows: Sequence[R], limit: int, item: Callable[[R], T], after: Callable[[R], str]
) -> tuple[list[T], str | None]:
    """One page from rows fetched in page order with ``LIMIT limit + 1``: the first ``limit``
    rows as items, and — when the extra row shows there is more — the cursor ``after(row)``
    of the page's last row (``None`` on the last page)."""
    items = [item(row) for row in rows[:limit]]
    if len(rows) <= limit or not items:
        return items, None
    return items, after(rows[limit - 1])


def fence(task_id: str, *, found: bool, applied: bool) -> None:
    """The answer of a fenced call (``extend_lease`` or a resolution): nothing when it was
    ``applied``; else ``StaleClaim`` when the task exists (``found``), ``NotFound`` when it
    does not."""
    if applied:
        return
    raise StaleClaim(task_id) if found else NotFound(task_id)


def first_of_each_id(tasks: Iterable[Envelope]) -> list[Envelope]:
    """The first task of each id, in order. An id given in two queues within the batch raises
    ``IDConflict`` (naming the queue it was first given in) before anything is stored."""
    first: dict[str, Envelope] = {}
    for task in tasks:
        seen = first.setdefault(task.id, task)
        if seen.queue != task.queue:
            raise IDConflict(task.id, seen.queue)
    return list(first.values())


def stored_flags(tasks: Sequence[Envelope], stored: set[str]) -> list[bool]:
    """One "stored" flag per task in order, from the ids a batch stored: an id given twice is
    stored once, so only its first occurrence is ``True``."""
    flags: list[bool] = []
    pending = set(stored)
    for task in tasks:
        flags.append(task.id in pending)
        pending.discard(task.id)
    return flags
