"""The API's DLQ endpoints: list with filters, groups by error, redrive and purge."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from litestar import Request, get, post
from litestar.params import JSONBody, QueryParameter

from rdq.admin import MAX_PACED_IDS, ActionReport, parse_rate
from rdq.audit import Action
from rdq.errors import ValidationError
from rdq.server._api_common import (
    Cursor,
    Limit,
    QueuePath,
    act_on,
    action_result,
    errors,
    node_of,
    principal_owner,
    selection,
    task_body,
)
from rdq.server._body import check_time, json_body
from rdq.server._models import (
    ActionRequest,
    ActionResult,
    DLQPage,
    GroupDoc,
    GroupList,
    RedriveRequest,
)
from rdq.spi import DLQFilter, Page, Selector, bounds, require

__all__ = ["dlq_groups", "list_dlq", "purge", "redrive"]


@get(
    "/v1/queues/{queue:str}/dlq",
    opt={"right": "read"},
    summary="One page of the dead-letter queue",
    description="Ordered by dead-lettering time, then id. Pass `next_cursor` back as `cursor` "
    "for the next page; a page may be shorter than `limit` while a cursor is returned (it also "
    "stops once its tasks encode to more than the node's `max_page_bytes`).",
    responses=errors(400, 404, 422),
    tags=["dlq"],
)
async def list_dlq(
    request: Request[Any, Any, Any],
    queue: QueuePath,
    error_type: Annotated[
        str | None, QueryParameter(max_length=bounds.MAX_ERROR_TYPE_LENGTH)
    ] = None,
    handler_ref: Annotated[
        str | None, QueryParameter(max_length=bounds.MAX_HANDLER_REF_LENGTH)
    ] = None,
    dead_lettered_after: Annotated[
        str | None,
        QueryParameter(
            format="date-time", max_length=64, description="RFC 3339 with offset; inclusive"
        ),
    ] = None,
    dead_lettered_before: Annotated[
        str | None,
        QueryParameter(
            format="date-time", max_length=64, description="RFC 3339 with offset; exclusive"
        ),
    ] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
    include_attempts: Annotated[
        bool, QueryParameter(description="Include every attempt record")
    ] = False,
) -> DLQPage:
    node = node_of(request)
    dlq_filter = _filter(error_type, handler_ref, dead_lettered_after, dead_lettered_before)
    page = Page(limit=limit, cursor=cursor or None, include_attempts=include_attempts)
    tasks, next_cursor = await node.admin.list_dlq(
        queue, dlq_filter, page, max_bytes=node.settings.max_page_bytes
    )
    return DLQPage(tasks=[task_body(request, t) for t in tasks], next_cursor=next_cursor)


@get(
    "/v1/queues/{queue:str}/dlq/groups",
    opt={"right": "read"},
    summary="The DLQ grouped by handler and error type",
    description="One group per (handler_ref, error type of the last attempt), largest first, "
    "with the first and last dead-lettering time. Redrive or purge a group with a filter of "
    "its `handler_ref` and `error_type`.",
    responses=errors(404, 422),
    tags=["dlq"],
)
async def dlq_groups(request: Request[Any, Any, Any], queue: QueuePath) -> GroupList:
    groups = await node_of(request).admin.dlq_groups(queue)
    return GroupList(
        queue=queue,
        groups=[
            GroupDoc(
                handler_ref=g.handler_ref,
                error_type=g.error_type,
                count=g.count,
                first_dead_lettered_at=g.first_dead_lettered_at,
                last_dead_lettered_at=g.last_dead_lettered_at,
            )
            for g in groups
        ],
    )


def _filter(
    error_type: str | None,
    handler_ref: str | None,
    after: datetime | str | None,
    before: datetime | str | None,
    prefix: str = "",
) -> DLQFilter | None:
    start = check_time(after, prefix + "dead_lettered_after")
    end = check_time(before, prefix + "dead_lettered_before")
    if not any(v is not None for v in (error_type, handler_ref, start, end)):
        return None
    return DLQFilter(
        error_type=error_type or None,
        handler_ref=handler_ref or None,
        dead_lettered_after=start,
        dead_lettered_before=end,
    )


def _selector(data: ActionRequest | RedriveRequest) -> Selector:
    chosen = selection(data.ids, data.filter)
    if isinstance(chosen, list):
        return Selector(ids=list(chosen))
    dlq_filter = _filter(
        chosen.error_type,
        chosen.handler_ref,
        chosen.dead_lettered_after,
        chosen.dead_lettered_before,
        "filter.",
    )
    return Selector(filter=dlq_filter or DLQFilter())


async def _act(
    request: Request[Any, Any, Any], action: Action, queue: str, data: ActionRequest
) -> ActionResult:
    node = node_of(request)
    bounds.check_queue(queue)
    selector = _selector(data)

    async def run() -> ActionReport:
        return await node.admin.act(
            action, queue, selector, actor=principal_owner(request), reason=data.reason
        )

    return await act_on(
        node, action, queue, selector, force=data.force, dry_run=data.dry_run, run=run
    )


@post(
    "/v1/queues/{queue:str}/dlq/redrive",
    opt={"right": "operate"},
    before_request=json_body(RedriveRequest),
    status_code=200,
    summary="Return dead-lettered tasks to their queue",
    description="Select by `ids` or `filter` (exactly one of them; both or neither is a 422; "
    "an empty filter selects the whole DLQ). `dry_run` only counts. With a `rate` (tasks per "
    'second, or `"600/min"`), the redrive is paced: the answer holds the `operation` it '
    "started (follow it at `/v1/queues/{queue}/redrives/{id}`), which this node drives and "
    "any node takes over if this one stops; by ids it takes at most 1000. Every redrive is "
    "audited with the token's owner. A queue nothing on the store knows is a 404 "
    '`unknown_name` (`"force": true` acts on it anyway); the answer names the ids it did '
    "not act on and why (`skipped`), and says what is close to a filter that matched nothing "
    "(`hint`).",
    responses=errors(400, 404, 413, 415, 422, 501),
    tags=["dlq"],
)
async def redrive(
    request: Request[Any, Any, Any], queue: QueuePath, data: JSONBody[RedriveRequest]
) -> ActionResult:
    if data.rate is None:
        plain = ActionRequest(
            ids=data.ids,
            filter=data.filter,
            dry_run=data.dry_run,
            reason=data.reason,
            force=data.force,
        )
        return await _act(request, "redrive", queue, plain)
    rate = parse_rate(data.rate if isinstance(data.rate, str) else f"{data.rate!r}")
    node = node_of(request)
    bounds.check_queue(queue)
    selector = _selector(data)
    if selector.ids is not None and len(selector.ids) > MAX_PACED_IDS:
        raise ValidationError(f"a paced redrive by ids takes at most {MAX_PACED_IDS}", "ids")
    require(node.storage, "control", "a redrive at a pace")
    if not data.force:
        await node.admin.check_names(queue)
    if data.dry_run:
        seen = await node.admin.preview("redrive", queue, selector)
        return action_result("redrive", queue, seen.count, True, seen)
    op = await node.admin.start_paced_redrive(
        queue, selector, rate, actor=principal_owner(request), reason=data.reason, driver=node.id
    )
    node.upkeep.drive(queue, op.id)
    from rdq.server._api_flow import operation_doc

    result = action_result("redrive", queue, op.total, False)
    result.operation = operation_doc(op)
    return result


@post(
    "/v1/queues/{queue:str}/dlq/purge",
    opt={"right": "operate"},
    before_request=json_body(ActionRequest),
    status_code=200,
    summary="Delete dead-lettered (or, by ids, cancelled) tasks",
    description="Select like redrive; by ids, CANCELLED tasks of the queue are deleted too. "
    "Every purge is audited with the token's owner. Unknown queues, skipped ids and hints as "
    "for redrive.",
    responses=errors(400, 404, 413, 415, 422),
    tags=["dlq"],
)
async def purge(
    request: Request[Any, Any, Any], queue: QueuePath, data: JSONBody[ActionRequest]
) -> ActionResult:
    return await _act(request, "purge", queue, data)
