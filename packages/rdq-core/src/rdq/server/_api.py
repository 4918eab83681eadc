"""The HTTP/JSON API v1: tasks, queues, the DLQ, and the operational endpoints."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody, PathParameter, QueryParameter
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from rdq.callbacks import CallbackBlocked, check_callback_url, is_callback_ref
from rdq.errors import NotFound, StorageUnavailable, ValidationError
from rdq.server._errors import ApiError, ErrorBody
from rdq.server._models import (
    ActionRequest,
    ActionResult,
    DLQPage,
    QueueList,
    StatsDoc,
    SubmitRequest,
    TaskDoc,
)
from rdq.server._node import Node
from rdq.spi import (
    DLQFilter,
    Envelope,
    Page,
    Selector,
    Stats,
    envelope_from_builtins,
    envelope_to_builtins,
    limits,
)

__all__ = ["api_handlers", "principal_guard"]

_READ_ONLY_FIELDS = (
    "status",
    "attempt_count",
    "redrive_count",
    "attempts",
    "created_at",
    "next_attempt_at",
    "lease_expires_at",
    "completed_at",
    "dead_lettered_at",
)


def _errors(*statuses: int) -> dict[int, ResponseSpec]:
    descriptions = {
        400: "Malformed JSON or an unusable cursor",
        401: "No valid bearer token",
        403: "The token lacks the right",
        404: "Not found",
        409: "The id exists in another queue",
        413: "The body is larger than the node accepts",
        422: "Invalid input (the error names the field)",
        503: "The storage is unavailable",
    }
    return {
        s: ResponseSpec(
            data_container=ErrorBody, description=descriptions[s], generate_examples=False
        )
        for s in (*statuses, 401, 403, 503)
    }


# --- auth ----------------------------------------------------------------------------------


def principal_guard(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    """Checks the bearer token against the right the handler names in ``opt["right"]``.

    ``"health"`` and ``"metrics"`` endpoints are open when the node is configured so, and need
    ``read`` otherwise. The principal is left in ``connection.state.principal``."""
    right = handler.opt.get("right")
    if right is None:
        return
    node: Node = connection.app.state.node
    if right == "health":
        if node.settings.open_health:
            return
        right = "read"
    elif right == "metrics":
        if node.settings.open_metrics:
            return
        right = "read"
    principal = node.auth.from_header(connection.headers.get("authorization"))
    if principal is None:
        raise NotAuthorizedException("a valid bearer token is required")
    if not principal.can(right):
        raise PermissionDeniedException(
            f"the token of {principal.owner!r} lacks the {right!r} right"
        )
    connection.state.principal = principal


def _node(request: Request[Any, Any, Any]) -> Node:
    node: Node = request.app.state.node
    return node


def _task_body(task: Envelope) -> dict[str, Any]:
    return envelope_to_builtins(task)


def _stats_doc(stats: Stats) -> StatsDoc:
    return StatsDoc(**msgspec.structs.asdict(stats))


# --- tasks ---------------------------------------------------------------------------------


@post(
    "/v1/tasks",
    opt={"right": "submit"},
    status_code=201,
    summary="Submit a task",
    description="201 when stored, 200 when the same id already exists in the same queue "
    "(nothing changes), 409 when it exists in another queue. Unknown fields are kept.",
    responses={
        200: ResponseSpec(
            data_container=TaskDoc, description="Already submitted", generate_examples=False
        ),
        **_errors(400, 409, 413, 422),
    },
    tags=["tasks"],
)
async def submit_task(
    request: Request[Any, Any, Any], data: JSONBody[SubmitRequest]
) -> Response[TaskDoc]:
    node = _node(request)
    raw: Any = msgspec.json.decode(await request.body())
    if not isinstance(raw, dict):
        raise ApiError(422, "validation_error", "the body must be a JSON object", "body")
    for name in _READ_ONLY_FIELDS:
        if name in raw:
            raise ApiError(422, "validation_error", "is set by rdq and cannot be submitted", name)
    raw.pop("delay", None)
    raw.pop("format_version", None)
    raw["id"] = data.id or uuid.uuid4().hex
    raw["queue"] = data.queue
    task = envelope_from_builtins(raw)
    limits.check_task(task)
    if is_callback_ref(task.handler_ref):
        try:
            check_callback_url(task.handler_ref, node.settings.callbacks)
        except CallbackBlocked as exc:
            raise ApiError(422, "validation_error", str(exc), "handler_ref") from None
    delay = timedelta(seconds=data.delay) if data.delay else None
    stored = await node.storage.enqueue(task, delay=delay)
    node.saw_queue(task.queue)
    current = await node.storage.get(task.id)
    return Response(_task_body(current), status_code=201 if stored else 200)  # type: ignore[arg-type]


@get(
    "/v1/tasks/{task_id:str}",
    opt={"right": "read"},
    summary="A task with its full attempt history",
    responses=_errors(404, 422),
    tags=["tasks"],
)
async def get_task(
    request: Request[Any, Any, Any],
    task_id: Annotated[str, PathParameter(min_length=1, max_length=limits.MAX_ID_LENGTH)],
) -> TaskDoc:
    task = await _node(request).admin.get(task_id)
    return _task_body(task)  # type: ignore[return-value]


# --- queues --------------------------------------------------------------------------------


@get(
    "/v1/queues",
    opt={"right": "read"},
    summary="Queues this node knows, with their statistics",
    description="The storage has no list of queues: a node lists the queues it is configured "
    "to work and those it has seen in requests since it started.",
    responses=_errors(),
    tags=["queues"],
)
async def list_queues(request: Request[Any, Any, Any]) -> QueueList:
    node = _node(request)
    stats = [_stats_doc(await node.storage.stats(q)) for q in node.known_queues]
    return QueueList(queues=stats)


QueuePath = Annotated[
    str,
    PathParameter(
        min_length=1,
        max_length=limits.MAX_QUEUE_LENGTH,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-:]*$",
    ),
]


@get(
    "/v1/queues/{queue:str}/stats",
    opt={"right": "read"},
    summary="Statistics of one queue",
    responses=_errors(422),
    tags=["queues"],
)
async def queue_stats(request: Request[Any, Any, Any], queue: QueuePath) -> StatsDoc:
    node = _node(request)
    stats = await node.storage.stats(limits.check_queue(queue))
    node.saw_queue(queue)
    return _stats_doc(stats)


# --- DLQ -----------------------------------------------------------------------------------


@get(
    "/v1/queues/{queue:str}/dlq",
    opt={"right": "read"},
    summary="One page of the dead-letter queue",
    description="Ordered by dead-lettering time, then id. Pass `next_cursor` back as `cursor` "
    "for the next page; a page may be shorter than `limit` while a cursor is returned.",
    responses=_errors(400, 422),
    tags=["dlq"],
)
async def list_dlq(
    request: Request[Any, Any, Any],
    queue: QueuePath,
    error_type: Annotated[str | None, QueryParameter(max_length=1024)] = None,
    handler_ref: Annotated[
        str | None, QueryParameter(max_length=limits.MAX_HANDLER_REF_LENGTH)
    ] = None,
    dead_lettered_after: Annotated[
        datetime | None, QueryParameter(description="RFC 3339 with offset; inclusive")
    ] = None,
    dead_lettered_before: Annotated[
        datetime | None, QueryParameter(description="RFC 3339 with offset; exclusive")
    ] = None,
    limit: Annotated[int, QueryParameter(ge=1, le=limits.MAX_LIMIT)] = 50,
    cursor: Annotated[str | None, QueryParameter(max_length=4096)] = None,
    include_attempts: Annotated[
        bool, QueryParameter(description="Include every attempt record")
    ] = False,
) -> DLQPage:
    node = _node(request)
    dlq_filter = _filter(error_type, handler_ref, dead_lettered_after, dead_lettered_before)
    page = Page(limit=limit, cursor=cursor or None, include_attempts=include_attempts)
    tasks, next_cursor = await node.admin.list_dlq(limits.check_queue(queue), dlq_filter, page)
    node.saw_queue(queue)
    return DLQPage(tasks=[_task_body(t) for t in tasks], next_cursor=next_cursor)  # type: ignore[misc]


def _filter(
    error_type: str | None,
    handler_ref: str | None,
    after: datetime | None,
    before: datetime | None,
    prefix: str = "",
) -> DLQFilter | None:
    for name, value in (("dead_lettered_after", after), ("dead_lettered_before", before)):
        if value is not None:
            limits.check_aware(value, prefix + name)
    if not any(v is not None for v in (error_type, handler_ref, after, before)):
        return None
    return DLQFilter(
        error_type=error_type or None,
        handler_ref=handler_ref or None,
        dead_lettered_after=after,
        dead_lettered_before=before,
    )


def _selector(data: ActionRequest) -> Selector:
    if (data.ids is None) == (data.filter is None):
        raise ValidationError("give either ids or filter (exactly one)", field="ids")
    if data.ids is not None:
        if not data.ids:
            raise ValidationError("must not be empty", field="ids")
        return Selector(ids=list(data.ids))
    assert data.filter is not None
    f = data.filter
    dlq_filter = _filter(
        f.error_type, f.handler_ref, f.dead_lettered_after, f.dead_lettered_before, "filter."
    )
    return Selector(filter=dlq_filter or DLQFilter())


async def _act(
    request: Request[Any, Any, Any], action: str, queue: str, data: JSONBody[ActionRequest]
) -> ActionResult:
    node = _node(request)
    limits.check_queue(queue)
    selector = _selector(data)
    principal = request.state.principal
    run = node.admin.redrive if action == "redrive" else node.admin.purge
    count = await run(
        queue, selector, actor=principal.owner, reason=data.reason, dry_run=data.dry_run
    )
    node.saw_queue(queue)
    return ActionResult(action=action, queue=queue, count=count, dry_run=data.dry_run)


@post(
    "/v1/queues/{queue:str}/dlq/redrive",
    opt={"right": "admin"},
    status_code=200,
    summary="Return dead-lettered tasks to their queue",
    description="Select by `ids` or `filter` (exactly one; an empty filter selects the whole "
    "DLQ). `dry_run` only counts. Every redrive is audited with the token's owner.",
    responses=_errors(400, 413, 422),
    tags=["dlq"],
)
async def redrive(
    request: Request[Any, Any, Any], queue: QueuePath, data: JSONBody[ActionRequest]
) -> ActionResult:
    return await _act(request, "redrive", queue, data)


@post(
    "/v1/queues/{queue:str}/dlq/purge",
    opt={"right": "admin"},
    status_code=200,
    summary="Delete dead-lettered tasks",
    description="Select like redrive. Every purge is audited with the token's owner.",
    responses=_errors(400, 413, 422),
    tags=["dlq"],
)
async def purge(
    request: Request[Any, Any, Any], queue: QueuePath, data: JSONBody[ActionRequest]
) -> ActionResult:
    return await _act(request, "purge", queue, data)


# --- operations ----------------------------------------------------------------------------


class Health(msgspec.Struct):
    status: str


@get(
    "/healthz",
    opt={"right": "health"},
    summary="The process is up",
    tags=["ops"],
    responses=_errors(),
)
async def healthz() -> Health:
    return Health(status="ok")


@get(
    "/readyz",
    opt={"right": "health"},
    summary="The storage is reachable",
    responses=_errors(),
    tags=["ops"],
)
async def readyz(request: Request[Any, Any, Any]) -> Health:
    try:
        await _node(request).storage.get("rdq-readiness-probe")
    except NotFound:
        return Health(status="ready")
    except StorageUnavailable:
        raise
    return Health(status="ready")


@get(
    "/metrics",
    opt={"right": "metrics"},
    summary="Prometheus metrics",
    media_type=CONTENT_TYPE_LATEST,
    responses=_errors(),
    tags=["ops"],
)
async def metrics() -> Response[bytes]:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


api_handlers = [
    submit_task,
    get_task,
    list_queues,
    queue_stats,
    list_dlq,
    redrive,
    purge,
    healthz,
    readyz,
    metrics,
]
