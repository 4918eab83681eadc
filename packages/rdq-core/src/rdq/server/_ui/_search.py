"""Find a task from the search box: by its exact id (one read), else by the start of its id.

No store finds ids by prefix (the storage contract has no such filter: the PostgreSQL task
table's primary key is in the database's collation, Redis keeps no index of ids in order), so
the console matches the start of an id over what every store lists cheaply: it reads the
lists of the queues' tasks, without their attempts, dead, pending and running first (what an
operator triages), then cancelled and succeeded ones, until it has read
:data:`SCAN_BUDGET` tasks. The page says how much it read; naming a queue spends the budget on
that queue alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from litestar import Request, get
from litestar.response import Redirect, Template

from rdq.errors import NotFound, ValidationError
from rdq.server._node import Node
from rdq.server._ui._common import node_of, page, session, text
from rdq.spi import Page, Stats, Status, TaskFilter, bounds, status_time

__all__ = ["SCAN_BUDGET", "search"]

SCAN_BUDGET = 10_000
"""Tasks a prefix search reads at most (in pages of :data:`_CHUNK`)."""
MAX_FOUND = 50
"""Matches shown at most."""
_CHUNK = 500
_ORDER = (
    (Status.DEAD, "dlq_depth"),
    (Status.PENDING, "pending"),
    (Status.IN_FLIGHT, "in_flight"),
    (Status.CANCELLED, "cancelled"),
    (Status.SUCCEEDED, "succeeded"),
)


@dataclass
class Scan:
    """What a prefix search found and how much of the store it read."""

    found: list[dict[str, Any]] = field(default_factory=list)
    read: int = 0
    total: int = 0
    estimated: bool = False
    complete: bool = True
    unlisted: list[str] = field(default_factory=list)
    """Queues whose tasks this store cannot list (no ``task_listing``)."""


@get("/search", include_in_schema=False)
async def search(request: Request[Any, Any, Any]) -> Template | Redirect:
    principal, _ = session(request)
    params = request.query_params
    query = text(params.get("q")) or ""
    queue = text(params.get("queue"))
    context: dict[str, Any] = {"principal": principal, "query": query, "queue": queue or ""}
    if not query:
        return page(request, "search.html", **context)
    node = node_of(request)
    try:
        bounds.check_task_id(query, field="q")
        if queue is not None:
            bounds.check_queue(queue)
    except ValidationError as exc:
        return page(request, "search.html", 422, error=f"{exc.field}: {exc.message}", **context)
    try:
        await node.admin.get(query)
    except NotFound:
        pass
    else:
        return Redirect(f"/ui/tasks/{quote(query, safe='')}", status_code=303)
    scan = await prefix_scan(node, query, queue)
    if len(scan.found) == 1 and scan.complete:
        return Redirect(f"/ui/tasks/{quote(scan.found[0]['id'], safe='')}", status_code=303)
    status = 200 if scan.found else 404
    return page(request, "search.html", status, scan=scan, budget=SCAN_BUDGET, **context)


async def prefix_scan(node: Node, prefix: str, queue: str | None) -> Scan:
    """The tasks whose id starts with ``prefix`` among the first :data:`SCAN_BUDGET` tasks
    listed (of ``queue``, or of every queue), in the order of :data:`_ORDER`."""
    queues: list[Stats] = (
        [await node.admin.stats(queue)] if queue is not None else await node.queues()
    )
    scan = Scan()
    for stats in queues:
        scan.total += sum(getattr(stats, name) for _, name in _ORDER)
        scan.estimated = scan.estimated or bool(stats.estimated)
    for status, name in _ORDER:
        for stats in queues:
            if getattr(stats, name):
                await _scan_state(node, stats.queue, status, prefix, scan)
    return scan


async def _scan_state(node: Node, queue: str, status: Status, prefix: str, scan: Scan) -> None:
    cursor: str | None = None
    while len(scan.found) < MAX_FOUND:
        left = SCAN_BUDGET - scan.read
        if left <= 0:
            scan.complete = False
            return
        try:
            tasks, cursor = await node.admin.list_tasks(
                queue, TaskFilter(status=status), Page(limit=min(_CHUNK, left), cursor=cursor)
            )
        except NotImplementedError:
            if queue not in scan.unlisted:
                scan.unlisted.append(queue)
                scan.complete = False
            return
        scan.read += len(tasks)
        for task in tasks:
            seen = any(f["id"] == task.id for f in scan.found)  # it moved while we read
            if task.id.startswith(prefix) and not seen and len(scan.found) < MAX_FOUND:
                scan.found.append(
                    {
                        "id": task.id,
                        "queue": queue,
                        "status": task.status.value,
                        "handler_ref": task.handler_ref,
                        "at": status_time(task),
                    }
                )
        if cursor is None:
            return
    scan.complete = False
