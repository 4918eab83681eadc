"""The console's pages: overview → queue (states as tabs, the DLQ grouped) → task; the audit
trail. (Search is in ``_search``.)"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import msgspec
from litestar import Request, get
from litestar.params import PathParameter
from litestar.response import Template

from rdq import flow
from rdq.blobs import reference_of
from rdq.errors import NotFound, StaleCursor, ValidationError
from rdq.retry import attempts_used, resolve
from rdq.server._api_retention import retention_of
from rdq.server._node import Node
from rdq.server._payloads import shown
from rdq.server._ui._charts import bar_chart, sparkline, summary
from rdq.server._ui._common import node_of, page, parse_time, queue_url, session, text
from rdq.server._ui._fleet import (
    Fleet,
    fleet_of,
    flow_of,
    holder_note,
    limits_of,
    rates_of,
    silent_holdings,
)
from rdq.server._ui._paging import DEFAULT_SIZE, SIZES, paging_of
from rdq.spi import (
    PAYLOAD_REF_HEADER,
    AuditFilter,
    Counts,
    DLQFilter,
    Envelope,
    Page,
    Status,
    TaskFilter,
    bounds,
    envelope_to_builtins,
    task_keys,
)

__all__ = ["STATES", "audit_page", "overview", "queue_page", "task_page"]

PathText = Annotated[str, PathParameter(max_length=1024)]


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
    node = node_of(request)
    # independent reads at once: the page takes as long as the slowest, not their sum
    flow, fleet, (series, rates_unsupported) = await asyncio.gather(
        flow_of(node), fleet_of(node), rates_of(node)
    )
    stats, silent, (groups, groups_note) = await asyncio.gather(
        node.queues(), silent_holdings(node, fleet), _top_groups(node, series, fleet.now)
    )
    queues = [msgspec.to_builtins(s) for s in stats]
    totals = {
        name: sum(q[name] for q in queues)
        for name in ("pending", "in_flight", "dlq_depth", "succeeded", "cancelled")
    }
    for q in queues:
        counts = series.get(q["queue"])
        q["spark"] = sparkline(counts) if counts else None
        q["dead_recent"] = summary(counts, RECENT_MINUTES)["dead"] if counts else 0
        q["unserved"] = _unserved(q, fleet)
    # No counts, or none of a recent death (not yet flushed, or only old dead): the deepest
    # DLQs, so that dead tasks are never summed up as none.
    deepest = not groups and groups_note is None and totals["dlq_depth"] > 0
    if deepest:
        groups, groups_note = await _deepest_groups(node, queues, fleet.now)
    return page(
        request,
        "overview.html",
        principal=principal,
        queues=queues,
        totals=totals,
        states=STATES,
        flow=flow,
        fleet=fleet,
        silent=silent,
        rates_unsupported=rates_unsupported,
        recent_minutes=RECENT_MINUTES,
        groups=groups,
        groups_note=groups_note,
        groups_deepest=deepest,
        live=True,
    )


RECENT_MINUTES = 15
"""The overview's "dead in the last … min"."""
TOP_GROUPS = 8
GROUP_QUEUES = 5
"""The overview groups the DLQs of at most this many queues: those where the most tasks died
in the last hour (every DLQ is grouped by reading it, so the page does not group them all)."""


def _unserved(stats: dict[str, Any], fleet: Fleet) -> bool:
    """The queue has due tasks and no live worker claims from it (known only from a store
    with a worker registry)."""
    return (
        fleet.known
        and stats.get("oldest_pending_age") is not None
        and not fleet.serving(stats["queue"])
    )


async def _top_groups(
    node: Node, series: dict[str, list[Counts]], now: datetime | None
) -> tuple[list[dict[str, Any]], str | None]:
    """The largest DLQ groups of the queues where the most tasks died in the last hour (by
    the store's per-minute counts), those with a task dead in the last hour first. Only from
    a store that groups in the backend (the others page through the DLQ); none without counts
    (see :func:`_deepest_groups`)."""
    if not node.storage.capabilities().group_pushdown:
        return [], "This store groups the DLQ by reading it: open a queue's Dead tab."
    if not series:
        return [], None
    dead = {queue: summary(counts)["dead"] for queue, counts in series.items()}
    chosen = sorted((q for q in dead if dead[q]), key=lambda q: -dead[q])[:GROUP_QUEUES]
    if not chosen:
        return [], None  # the overview groups the deepest DLQs, if any
    return await _groups_of(node, chosen, now), None


async def _deepest_groups(
    node: Node, queues: list[dict[str, Any]], now: datetime | None
) -> tuple[list[dict[str, Any]], str | None]:
    """For a store without per-minute counts: the groups of the deepest DLQs."""
    deepest = sorted((q for q in queues if q["dlq_depth"]), key=lambda q: -q["dlq_depth"])
    return await _groups_of(node, [q["queue"] for q in deepest[:GROUP_QUEUES]], now), None


async def _groups_of(node: Node, queues: list[str], now: datetime | None) -> list[dict[str, Any]]:
    grouped = await asyncio.gather(*(node.admin.dlq_groups(q) for q in queues))
    found = [
        {"queue": queue, **msgspec.to_builtins(g)}
        for queue, groups in zip(queues, grouped, strict=True)
        for g in groups
    ]
    since = (now or datetime.now(UTC)) - timedelta(hours=1)

    def rank(group: dict[str, Any]) -> tuple[bool, int]:
        last = datetime.fromisoformat(group["last_dead_lettered_at"].replace("Z", "+00:00"))
        group["recent"] = last >= since
        return (not group["recent"], -group["count"])

    return sorted(found, key=rank)[:TOP_GROUPS]


def state_of(value: str | None) -> State:
    return _BY_KEY.get((value or "pending").lower(), STATES[0])


def busiest_state(stats: dict[str, Any]) -> State:
    """The tab a queue opens on when none is asked for: Dead when its DLQ holds tasks (what
    an operator comes for), else the first state that holds any, else Pending."""
    order = (_BY_KEY["dead"], *(s for s in STATES if s.key != "dead"))
    return next((s for s in order if stats.get(s.stat)), STATES[0])


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
    filters = filters_of(params)
    cursor = text(params.get("cursor"))
    paging = paging_of(params, cursor is not None)
    error: str | None = paging.error
    tasks: list[dict[str, Any]] = []
    next_cursor: str | None = None
    groups: list[dict[str, Any]] = []
    try:
        bounds.check_queue(queue)
    except ValidationError as exc:
        message = f"queue: {exc.message}"
        return page(request, "error.html", 422, principal=principal, message=message)
    stats = msgspec.to_builtins(await node.admin.stats(queue))
    state = state_of(params.get("state")) if params.get("state") else busiest_state(stats)
    try:
        selected = task_filter(state, filters)
        found, next_cursor = await _list(
            node, queue, state, selected, filters, Page(limit=paging.size, cursor=cursor)
        )
        may_read = principal.can("payloads")
        tasks = [envelope_to_builtins(shown(t, may_read, node.keys)[0]) for t in found]
    except (ValidationError, StaleCursor) as exc:
        error = f"{exc.field}: {exc.message}" if isinstance(exc, ValidationError) else str(exc)
    except NotImplementedError:
        error = f"This store cannot list {state.label.lower()} tasks yet."
    retention: dict[str, Any] | None = None
    if state.status == Status.DEAD:
        groups = [msgspec.to_builtins(g) for g in await node.admin.dlq_groups(queue)]
        await _add_samples(node, queue, groups)
        retention = msgspec.to_builtins(await retention_of(node, queue))
    not_kept = (
        state.status == Status.SUCCEEDED
        and node.engine_app is not None
        and not node.engine_app.queue_config(queue).keep_succeeded
    )
    flow = await flow_of(node, queue)
    fleet = await fleet_of(node)
    declared = await limits_of(node, queue)
    holding = declared.full()
    holding.update({p.key: "paused" for p in flow.pauses})
    holding.update({b.key: f"breaker {b.state.replace('_', '-')}" for b in flow.tripped})
    for task in tasks:
        task["silent"] = holder_note(task, fleet)
        if task.get("status") == "PENDING" and holding:
            keys = ["*", f"handler:{task.get('handler_ref')}", *(task.get("keys") or [])]
            task["held_by"] = next(((k, holding[k]) for k in keys if k in holding), None)
    series, rates_unsupported = await rates_of(node, queue)
    redrives = []
    if flow.unsupported is None:
        found_ops = await node.admin.paced_redrives(queue)
        running = [op for op in found_ops if not op.finished]
        redrives = running + [op for op in found_ops if op.finished][: max(0, 3 - len(running))]
    kept = {k: v for k, v in filters.items() if v}
    sized = {**kept, **paging.params()}
    tabs = [
        {"state": s, "count": stats.get(s.stat, 0), "url": queue_url(queue, state=s.key, **sized)}
        for s in STATES
    ]
    total = None if kept else stats.get(state.stat)
    estimated = state.stat in (stats.get("estimated") or ())
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
        first_url=queue_url(queue, state=state.key, **sized),
        next_url=queue_url(
            queue,
            state=state.key,
            cursor=next_cursor,
            **kept,
            **paging.params(at=paging.at + len(tasks)),
        )
        if next_cursor
        else None,
        position=paging.position(len(tasks), total, estimated, next_cursor is not None),
        sizes=[
            (n, queue_url(queue, state=state.key, **kept, size=n if n != DEFAULT_SIZE else None))
            for n in SIZES
        ],
        size=paging.size,
        default_size=DEFAULT_SIZE,
        confirm_url=f"/ui/queues/{quote(queue, safe='')}/confirm",
        all_query=urlencode({"state": state.key, "scope": "filter", **kept}),
        flow=flow,
        limits=declared,
        fleet=fleet,
        unserved=_unserved(stats, fleet),
        serving=fleet.serving(queue),
        chart=bar_chart(series[queue]) if queue in series else None,
        rates_unsupported=rates_unsupported,
        redrives=[msgspec.to_builtins(op) for op in redrives],
        control_url=f"/ui/queues/{quote(queue, safe='')}/control",
        retention=retention,
        not_kept=not_kept,
        export_url=f"/ui/queues/{quote(queue, safe='')}/export"
        + (f"?{urlencode(kept)}" if kept else ""),
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
    asked: Page,
) -> tuple[list[Envelope], str | None]:
    page_ = Page(limit=asked.limit, cursor=asked.cursor, include_attempts=True)
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
    seen, payload_state = shown(envelope, principal.can("payloads"), node.keys)
    task = envelope_to_builtins(seen)
    payload, cut = _shown_payload(seen) if payload_state in ("clear", "decrypted") else ("", None)
    known = set(Envelope.__struct_fields__) - {"extra"}
    extra = {k: v for k, v in task.items() if k not in known}
    fleet = await fleet_of(node)
    return page(
        request,
        "task.html",
        principal=principal,
        task=task,
        silent=holder_note(task, fleet),
        holds=await _holds(node, envelope),
        retry_waits=await _waits(node, envelope, fleet.now),
        payload=payload,
        payload_state=payload_state,
        payload_cut=cut,
        payload_ref=envelope.headers.get(PAYLOAD_REF_HEADER),
        payload_missing=reference_of(envelope) is not None,
        extra=msgspec.json.format(msgspec.json.encode(extra), indent=2).decode() if extra else "",
        attempts=list(reversed(task.get("attempts") or [])),
        newest_traceback=next(
            (i for i, a in enumerate(reversed(envelope.attempts)) if a.traceback), None
        ),
        open_traceback=request.query_params.get("traceback") == "open",
        attempts_left=await _attempts_left(node, envelope),
        live=envelope.status in (Status.PENDING, Status.IN_FLIGHT),
    )


SHOWN_PAYLOAD = 256 * 1024
"""Characters of a payload's JSON the task page shows; a larger one is downloaded whole."""


def _shown_payload(task: Envelope) -> tuple[str, int | None]:
    """The payload's JSON as the page shows it (indented; the start only when it is large)
    and, when cut, its whole size in bytes."""
    data = msgspec.json.encode(task.payload)
    if len(data) > SHOWN_PAYLOAD:
        return data[:SHOWN_PAYLOAD].decode(errors="replace"), len(data)
    return msgspec.json.format(data, indent=2).decode(), None


async def _holds(node: Node, task: Envelope) -> list[dict[str, Any]]:
    """The pauses and open or half-open breakers that hold a PENDING task back."""
    if task.status is not Status.PENDING:
        return []
    flow = await flow_of(node, task.queue)
    keys = set(task_keys(task))
    held: list[dict[str, Any]] = [
        {"kind": "pause", "key": p.key, "by": p.by, "reason": p.reason, "since": p.at}
        for p in flow.pauses
        if p.key in keys
    ]
    held += [
        {"kind": b.state, "key": b.key, "by": b.by, "reason": b.reason, "since": b.since}
        for b in flow.tripped
        if b.key in keys
    ]
    return held


async def _waits(node: Node, task: Envelope, now: datetime | None) -> bool:
    """The task is PENDING and waits out a backoff that a "retry now" can cut short."""
    if task.status is not Status.PENDING or task.next_attempt_at is None:
        return False
    if not node.storage.capabilities().control:
        return False
    return task.next_attempt_at > (now or await node.storage.now())


async def _attempts_left(node: Node, task: Envelope) -> dict[str, int] | None:
    """What the task's attempts come to, counted as the engine counts them
    (``rdq.retry.attempts_used``: since the last redrive, not counting INTERRUPTED and
    DEFERRED attempts nor failures during an outage of its breaker's key): ``number`` (the
    attempt that runs now or next), ``used`` (of ``max_attempts``, once that one runs),
    ``left`` (after it) and ``uncharged``. Known only when the node knows the queue's
    config: it is declared in the node's application (``--app``, the config file) or
    worked by the node."""
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
    key = flow.breaker_key(task)
    breaker = next((b for b in (await flow_of(node, task.queue)).breakers if b.key == key), None)
    number = task.attempt_count + 1
    used = attempts_used(task, number, breaker.outages if breaker else ())
    return {
        "number": number,
        "used": used,
        "max": config.max_attempts,
        "left": max(config.max_attempts - used, 0),
        "uncharged": number - used,
    }


@get("/audit", include_in_schema=False)
async def audit_page(request: Request[Any, Any, Any]) -> Template:
    principal, _ = session(request)
    params = request.query_params
    wanted = {k: text(params.get(k)) for k in ("queue", "action", "actor")}
    cursor = text(params.get("cursor"))
    paging = paging_of(params, cursor is not None)
    entries: list[dict[str, Any]] = []
    next_cursor: str | None = None
    error: str | None = paging.error
    try:
        audit_filter = AuditFilter(
            queue=wanted["queue"], action=wanted["action"], actor=wanted["actor"]
        )
        found, next_cursor = await node_of(request).admin.list_audit(
            audit_filter if audit_filter != AuditFilter() else None,
            Page(limit=paging.size, cursor=cursor),
        )
        entries = [msgspec.to_builtins(e) for e in found]
    except (ValidationError, StaleCursor) as exc:
        error = str(exc)
    kept = {k: v for k, v in wanted.items() if v}

    def url(**params: str | None) -> str:
        chosen = {k: v for k, v in params.items() if v}
        return "/ui/audit" + (f"?{urlencode(chosen)}" if chosen else "")

    return page(
        request,
        "audit.html",
        principal=principal,
        entries=entries,
        wanted=wanted,
        error=error,
        cursor=cursor,
        first_url=url(**kept, **paging.params()),
        next_url=url(**kept, cursor=next_cursor, **paging.params(at=paging.at + len(entries)))
        if next_cursor
        else None,
        position=paging.position(len(entries), None, False, next_cursor is not None),
        sizes=[(n, url(**kept, size=str(n) if n != DEFAULT_SIZE else None)) for n in SIZES],
        size=paging.size,
        live=cursor is None,
    )
