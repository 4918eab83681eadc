"""Redrive (at once or at a pace), purge, cancel and retry now from the console: always
through a confirmation page that shows how many tasks the action would touch (a dry run) and
asks for a reason; audited under the token's owner. A paced redrive is driven by this node."""

from __future__ import annotations

from typing import Any

from litestar import Request, get, post
from litestar.response import Redirect, Template

from rdq.admin import MAX_PACED_IDS, TaskSelector, parse_rate
from rdq.audit import Action
from rdq.server._ui._common import (
    UIError,
    check_csrf,
    node_of,
    page,
    queue_url,
    require_operator,
    session,
    text,
)
from rdq.server._ui._pages import (
    FILTER_KEYS,
    PathText,
    State,
    dlq_filter,
    filters_of,
    state_of,
    task_filter,
)
from rdq.spi import Selector, Status, bounds

__all__ = ["act", "confirm"]

_ALLOWED: dict[Status, tuple[Action, ...]] = {
    Status.DEAD: ("redrive", "purge"),
    Status.PENDING: ("cancel", "retry_now"),
    Status.IN_FLIGHT: ("cancel",),
    Status.CANCELLED: ("purge",),
}


def _action(state: State, value: Any, by_ids: bool) -> Action:
    allowed = _ALLOWED.get(state.status, ())
    if value not in allowed:
        raise UIError(404, f"no such action on {state.label.lower()} tasks")
    if state.status == Status.CANCELLED and not by_ids:
        raise UIError(422, "cancelled tasks are purged by selecting them")
    action: Action = value
    return action


def _selector(
    action: Action, state: State, ids: list[str], filters: dict[str, str | None]
) -> Selector | TaskSelector:
    if action in ("cancel", "retry_now"):
        if ids:
            return TaskSelector(ids=ids)
        return TaskSelector(filter=task_filter(state, filters))
    if ids:
        return Selector(ids=ids)
    return Selector(filter=dlq_filter(filters))


def _describe(state: State, ids: list[str], filters: dict[str, str | None]) -> str:
    if ids:
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        return f"the selected task(s): {shown}"
    kept = [f"{k.replace('_', ' ')} {v}" for k, v in filters.items() if v]
    where = f" with {', '.join(kept)}" if kept else ""
    return f"every {state.label.lower()} task{where}"


@get("/queues/{queue:str}/confirm", include_in_schema=False)
async def confirm(request: Request[Any, Any, Any], queue: PathText) -> Template:
    principal, _ = session(request)
    require_operator(principal)
    bounds.check_queue(queue)
    params = request.query_params
    state = state_of(params.get("state"))
    ids = [i for i in params.getall("ids", []) if i]
    if not ids and params.get("scope") != "filter":
        raise UIError(422, "select at least one task first")
    action = _action(state, params.get("action"), bool(ids))
    filters = {} if ids else filters_of(params)
    selector = _selector(action, state, ids, filters or dict.fromkeys(FILTER_KEYS))
    admin = node_of(request).admin
    if action == "retry_now" and isinstance(selector, TaskSelector):
        count = await admin.count_retry_now(queue, selector)
    elif isinstance(selector, TaskSelector):
        count = await admin.count_cancel(queue, selector)
    else:
        count = await admin.count(queue, selector, action=action)
    paced = action == "redrive" and admin.storage.capabilities().control
    return page(
        request,
        "confirm.html",
        principal=principal,
        action=action,
        queue=queue,
        state=state,
        ids=ids,
        count=count,
        filter_fields=[(k, v) for k, v in filters.items() if v],
        description=_describe(state, ids, filters or dict.fromkeys(FILTER_KEYS)),
        back_url=queue_url(queue, state=state.key, **{k: v for k, v in filters.items() if v}),
        paced=paced and (not ids or len(ids) <= MAX_PACED_IDS),
    )


@post("/queues/{queue:str}/act", include_in_schema=False, status_code=303)
async def act(request: Request[Any, Any, Any], queue: PathText) -> Redirect:
    principal, value = session(request)
    form = await request.form()
    check_csrf(request, principal, value, form.get("csrf"))
    require_operator(principal)
    bounds.check_queue(queue)
    state = state_of(text(form.get("state")))
    ids = [i for i in form.getall("ids", []) if isinstance(i, str) and i]
    if form.get("scope") != "filter" and not ids:
        raise UIError(422, "select at least one task first")
    action = _action(state, form.get("action"), bool(ids))
    filters = {k: text(form.get(k)) for k in FILTER_KEYS}
    if ids:
        filters = dict.fromkeys(FILTER_KEYS)
    reason = text(form.get("reason"))
    if reason is None:
        raise UIError(422, "give a reason: it is kept in the audit record")
    selector = _selector(action, state, ids, filters)
    node = node_of(request)
    admin = node.admin
    actor = principal.actor
    rate = text(form.get("rate"))
    if rate is not None and action == "redrive" and isinstance(selector, Selector):
        op = await admin.start_paced_redrive(
            queue, selector, parse_rate(rate), actor=actor, reason=reason, driver=node.id
        )
        node.upkeep.drive(queue, op.id)
        target = queue_url(queue, state=state.key, done="paced", count=str(op.total))
        return Redirect(target + "#controls", status_code=303)
    if action == "retry_now" and isinstance(selector, TaskSelector):
        count = await admin.retry_now(queue, selector, actor=actor, reason=reason)
        target = queue_url(queue, state=state.key, done=action, count=str(count))
        return Redirect(target, status_code=303)
    report = await admin.act(action, queue, selector, actor=actor, reason=reason)
    target = queue_url(
        queue,
        state=state.key,
        done=action,
        count=str(report.done),
        matched=str(report.matched),
        gone=str(report.gone),
        archived=str(report.archived) if report.where else None,
    )
    return Redirect(target, status_code=303)
