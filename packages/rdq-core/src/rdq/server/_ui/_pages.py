"""The console's pages: overview → queue (states as tabs, the DLQ grouped) → task; search by
id; the audit trail."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import msgspec
from litestar import Request, get
from litestar.params import PathParameter
from litestar.response import Redirect, Template

from rdq.errors import NotFound, StaleCursor, ValidationError
from rdq.retry import resolve
from rdq.server._node import Node
from rdq.server._ui._common import node_of, page, parse_time, queue_url, session, text
from rdq.spi import (
    AuditFilter,
    DLQFilter,
    Envelope,
    Page,
    Status,
    TaskFilter,
    envelope_to_builtins,
    limits,
)

__all__ = ["STATES", "audit_page", "overview", "queue_page", "search", "task_page"]

PathText = Annotated[str, PathParameter(max_length=1024)]
PAGE_SIZE = 50


@dataclass(frozen=True)
class State:
    key: str
    status: Status
    label: str
    stat: str
    time_label: str
    time_field: str


STATES = (
    State("pending", Status.PENDING, "Pending", "pending", "Due", "next_attempt_at"),
    State("running", Status.IN_FLIGHT, "Running", "in_flight", "Lease expires", "lease_expires_at"),
    State("dead", Status.DEAD, "Dead", "dlq_depth", "Dead-lettered", "dead_lettered_at"),
    State("succeeded", Status.SUCCEEDED, "Succeeded", "succeeded", "Completed", "completed_at"),
    State("cancelled", Status.CANCELLED, "Cancelled", "cancelled", "Cancelled", "cancelled_at"),
)
_BY_KEY = {s.key: s for s in STATES}
FILTER_KEYS = ("error_type", "handler_ref", "after", "before")


@get("/", include_in_schema=False)
async def overview(request: Request[Any, Any, Any]) -> Template:
    principal, _ = session(request)
    queues = [msgspec.to_builtins(s) for s in await node_of(request).queues()]
    totals = {
        name: sum(q[name] for q in queues)
        for name in ("pending", "in_flight", "dlq_depth", "succeeded", "cancelled")
    }
    return page(
        request,
        "overview.html",
        principal=principal,
        queues=queues,
        totals=totals,
        states=STATES,
        live=True,
    )


def state_of(value: str | None) -> State:
    return _BY_KEY.get((value or "pending").lower(), STATES[0])


def filters_of(params: Any) -> dict[str, str | None]:
    return {k: text(params.get(k)) for k in FILTER_KEYS}


def task_filter(state: State, filters: dict[str, str | None]) -> TaskFilter:
    return TaskFilter(
        status=state.status,
        error_type=filters["error_type"],
        handler_ref=filters["handler_ref"],
        after=parse_time(filters["after"], "after"),
        before=parse_time(filters["before"], "before"),
    )


def dlq_filter(filters: dict[str, str | None]) -> DLQFilter:
    return DLQFilter(
        error_type=filters["error_type"],
        handler_ref=filters["handler_ref"],
        dead_lettered_after=parse_time(filters["after"], "after"),
        dead_lettered_before=parse_time(filters["before"], "before"),
    )


@get("/queues/{queue:str}", include_in_schema=False)
async def queue_page(request: Request[Any, Any, Any], queue: PathText) -> Template:
    principal, _ = session(request)
    node = node_of(request)
    params = request.query_params
    state = state_of(params.get("state"))
    filters = filters_of(params)
    cursor = text(params.get("cursor"))
    error: str | None = None
    tasks: list[dict[str, Any]] = []
    next_cursor: str | None = None
    groups: list[dict[str, Any]] = []
    try:
        limits.check_queue(queue)
    except ValidationError as exc:
        message = f"queue: {exc.message}"
        return page(request, "error.html", 422, principal=principal, message=message)
    stats = msgspec.to_builtins(await node.admin.stats(queue))
    try:
        selected = task_filter(state, filters)
        found, next_cursor = await _list(node, queue, state, selected, filters, cursor)
        tasks = [envelope_to_builtins(t) for t in found]
    except (ValidationError, StaleCursor) as exc:
        error = f"{exc.field}: {exc.message}" if isinstance(exc, ValidationError) else str(exc)
    except NotImplementedError:
        error = f"This store cannot list {state.label.lower()} tasks yet."
    if state.status == Status.DEAD:
        groups = [msgspec.to_builtins(g) for g in await node.admin.dlq_groups(queue)]
        await _add_samples(node, queue, groups)
    kept = {k: v for k, v in filters.items() if v}
    tabs = [
        {"state": s, "count": stats.get(s.stat, 0), "url": queue_url(queue, state=s.key, **kept)}
        for s in STATES
    ]
    return page(
        request,
        "queue.html",
        principal=principal,
        queue=queue,
        stats=stats,
        state=state,
        tabs=tabs,
        filters=filters,
        filtered=bool(kept),
        tasks=tasks,
        groups=groups,
        error=error,
        cursor=cursor,
        first_url=queue_url(queue, state=state.key, **kept),
        next_url=queue_url(queue, state=state.key, cursor=next_cursor, **kept)
        if next_cursor
        else None,
        confirm_url=f"/ui/queues/{quote(queue, safe='')}/confirm",
        all_query=urlencode({"state": state.key, "scope": "filter", **kept}),
        live=True,
    )


SAMPLED_GROUPS = 10
"""Groups shown with a sample task (the first of the group), when the store filters itself."""


async def _add_samples(node: Node, queue: str, groups: list[dict[str, Any]]) -> None:
    """Give the largest groups a ``sample``: the id and last error message of their first task
    (one indexed read per group, so only when the store filters in the backend)."""
    if not node.admin.filters_in_storage:
        return
    for group in groups[:SAMPLED_GROUPS]:
        if group["error_type"] is None:
            continue
        chosen = DLQFilter(handler_ref=group["handler_ref"], error_type=group["error_type"])
        found, _ = await node.admin.list_dlq(queue, chosen, Page(limit=1, include_attempts=True))
        if found:
            last = found[0].attempts[-1] if found[0].attempts else None
            group["sample"] = {
                "id": found[0].id,
                "message": (last.error_message or "") if last else "",
                "traceback": bool(last and last.traceback),
            }


async def _list(
    node: Node,
    queue: str,
    state: State,
    selected: TaskFilter,
    filters: dict[str, str | None],
    cursor: str | None,
) -> tuple[list[Envelope], str | None]:
    page_ = Page(limit=PAGE_SIZE, cursor=cursor, include_attempts=True)
    budget = node.settings.max_page_bytes
    if state.status == Status.DEAD:
        chosen = dlq_filter(filters)
        return await node.admin.list_dlq(
            queue, chosen if chosen != DLQFilter() else None, page_, max_bytes=budget
        )
    return await node.admin.list_tasks(queue, selected, page_, max_bytes=budget)


@get("/tasks/{task_id:str}", include_in_schema=False)
async def task_page(request: Request[Any, Any, Any], task_id: PathText) -> Template:
    principal, _ = session(request)
    node = node_of(request)
    try:
        envelope = await node.admin.get(task_id)
    except (NotFound, ValidationError):
        return page(request, "search.html", 404, principal=principal, query=task_id, not_found=True)
    task = envelope_to_builtins(envelope)
    payload = msgspec.json.format(msgspec.json.encode(envelope.payload), indent=2).decode()
    known = set(Envelope.__struct_fields__) - {"extra"}
    extra = {k: v for k, v in task.items() if k not in known}
    return page(
        request,
        "task.html",
        principal=principal,
        task=task,
        payload=payload,
        extra=msgspec.json.format(msgspec.json.encode(extra), indent=2).decode() if extra else "",
        attempts=list(reversed(task.get("attempts") or [])),
        attempts_left=_attempts_left(node, envelope),
        live=envelope.status in (Status.PENDING, Status.IN_FLIGHT),
    )


def _attempts_left(node: Node, task: Envelope) -> int | None:
    """How many attempts the task has left, when the node knows its queue's config: the queue
    is declared in the node's application (``--app``, the config file) or worked by the node."""
    app = node.engine_app
    if app is None or task.status not in (Status.PENDING, Status.IN_FLIGHT):
        return None
    settings = node.settings
    if task.queue not in app.queues and not (settings.work and task.queue in settings.queues):
        return None
    try:
        config = resolve(app.queue_config(task.queue), task.retry)
    except Exception:
        return None
    return max(config.max_attempts - task.attempt_count, 0)


@get("/search", include_in_schema=False)
async def search(request: Request[Any, Any, Any]) -> Template | Redirect:
    principal, _ = session(request)
    query = text(request.query_params.get("q")) or ""
    if not query:
        return page(request, "search.html", principal=principal, query="")
    try:
        await node_of(request).admin.get(query)
    except ValidationError as exc:
        return page(
            request, "search.html", 422, principal=principal, query=query, error=exc.message
        )
    except NotFound:
        return page(request, "search.html", 404, principal=principal, query=query, not_found=True)
    return Redirect(f"/ui/tasks/{quote(query, safe='')}", status_code=303)


@get("/audit", include_in_schema=False)
async def audit_page(request: Request[Any, Any, Any]) -> Template:
    principal, _ = session(request)
    params = request.query_params
    wanted = {k: text(params.get(k)) for k in ("queue", "action", "actor")}
    cursor = text(params.get("cursor"))
    entries: list[dict[str, Any]] = []
    next_cursor: str | None = None
    error: str | None = None
    try:
        audit_filter = AuditFilter(
            queue=wanted["queue"], action=wanted["action"], actor=wanted["actor"]
        )
        found, next_cursor = await node_of(request).admin.list_audit(
            audit_filter if audit_filter != AuditFilter() else None,
            Page(limit=PAGE_SIZE, cursor=cursor),
        )
        entries = [msgspec.to_builtins(e) for e in found]
    except (ValidationError, StaleCursor) as exc:
        error = str(exc)
    kept = {k: v for k, v in wanted.items() if v}
    return page(
        request,
        "audit.html",
        principal=principal,
        entries=entries,
        wanted=wanted,
        error=error,
        cursor=cursor,
        first_url="/ui/audit" + (f"?{urlencode(kept)}" if kept else ""),
        next_url=f"/ui/audit?{urlencode({**kept, 'cursor': next_cursor})}" if next_cursor else None,
        live=cursor is None,
    )
