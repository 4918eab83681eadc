"""Walking a selection page by page, filtered by the store or, without pushdown, here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from rdq.admin._fallback import SCAN_PAGE
from rdq.errors import NotFound
from rdq.spi import DLQFilter, Envelope, Page, Status, Storage, TaskFilter

__all__ = ["ids_in", "scan_dlq", "scan_tasks"]


async def ids_in(
    storage: Storage, queue: str, ids: Sequence[str], statuses: tuple[Status, ...]
) -> list[str]:
    found: list[str] = []
    for task_id in dict.fromkeys(ids):
        try:
            task = await storage.get(task_id)
        except NotFound:
            continue
        if task.queue == queue and task.status in statuses:
            found.append(task_id)
    return found


async def scan_dlq(
    storage: Storage,
    pushdown: bool,
    queue: str,
    dlq_filter: DLQFilter | None,
    *,
    attempts: bool = False,
) -> AsyncIterator[list[Envelope]]:
    """Yield the DLQ of ``queue`` page by page, filtered (by the store or here); with
    ``attempts``, every task with its attempts."""
    store_filter = dlq_filter if pushdown else None
    need_attempts = attempts or (
        not pushdown and dlq_filter is not None and dlq_filter.error_type is not None
    )
    cursor: str | None = None
    while True:
        page = Page(limit=SCAN_PAGE, cursor=cursor, include_attempts=need_attempts)
        tasks, cursor = await storage.dlq_list(queue, store_filter, page)
        if dlq_filter is not None and not pushdown:
            tasks = [t for t in tasks if dlq_filter.matches(t)]
        if tasks:
            yield tasks
        if cursor is None:
            return


async def scan_tasks(
    storage: Storage, pushdown: bool, queue: str, task_filter: TaskFilter
) -> AsyncIterator[list[Envelope]]:
    """Yield the tasks ``task_filter`` selects in ``queue``, page by page."""
    store_filter = task_filter if pushdown else TaskFilter(status=task_filter.status)
    need_attempts = not pushdown and task_filter.error_type is not None
    cursor: str | None = None
    while True:
        page = Page(limit=SCAN_PAGE, cursor=cursor, include_attempts=need_attempts)
        tasks, cursor = await storage.list_tasks(queue, store_filter, page)
        tasks = [t for t in tasks if task_filter.matches(t)]
        if tasks:
            yield tasks
        if cursor is None:
            return
