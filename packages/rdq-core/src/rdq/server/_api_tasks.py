"""The API's task endpoints: submit, read one, list a queue's tasks by status, cancel."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import ResponseHeader
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody, PathParameter, QueryParameter

from rdq._dedup import admit as admit_under_key
from rdq._dedup import dedup_of
from rdq._ids import new_task_ids
from rdq.admin import ActionReport, Outlook, TaskSelector
from rdq.app import App, unknown_handler, unknown_queue
from rdq.callbacks import CallbackBlocked, check_callback_url, is_callback_ref
from rdq.client import task_keys_for
from rdq.errors import ConfigError, DedupConflict, IDConflict, ValidationError
from rdq.keys import sealed_for
from rdq.server._api_common import (
    Cursor,
    Limit,
    QueuePath,
    Time,
    act_on,
    errors,
    node_of,
    principal_owner,
    selection,
    task_body,
)
from rdq.server._body import check_time, json_body, whole_numbers
from rdq.server._errors import ApiError
from rdq.server._models import (
    TASK_ID_PATTERN,
    ActionResult,
    CancelRequest,
    OutlookDoc,
    SubmitRequest,
    TaskDoc,
    TaskPage,
)
from rdq.spi import (
    Dedup,
    Envelope,
    Page,
    Status,
    TaskFilter,
    bounds,
    envelope_from_builtins,
    envelope_to_builtins,
)

__all__ = ["cancel_tasks", "get_task", "list_tasks", "submit_task", "task_outlook"]

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
    "claimed_by",
    "claimed_at",
    "cancelled_at",
    "corrupt",
)
_KNOWN_FIELDS = frozenset(SubmitRequest.__struct_fields__) | {"format_version"}


@post(
    "/v1/tasks",
    opt={"right": "submit"},
    before_request=json_body(SubmitRequest),
    status_code=201,
    summary="Submit a task",
    description="201 when stored, 200 when the same id already exists in the same queue "
    "(nothing changes; the stored task is returned to tokens with the read right, the "
    "submitted one to others), 409 when it exists in another queue. With a `dedup_key`, the "
    "submission is folded into the live task that holds the key (`dedup_mode`: skip, "
    "replace, extend or debounce): 201 when it added a task, else 200 with the task that "
    "holds the key; 409 when the key is held in another queue. The `RDQ-Outcome` header "
    "says what the submission did: `added`, `skipped`, `replaced` or `extended`; a "
    "submission that added no task is in the audit trail (`dedup`). On a node with an "
    "application (`--app`) a handler or queue it does not know is a 422 naming the closest "
    'known one (`"force": true` submits it anyway), and `queue` defaults to the '
    "handler's. The payload's JSON may "
    "take 1 MiB (1048576 bytes); unknown fields are kept and, as the JSON object they form, "
    "count towards that limit; payloads nest at most 64 levels.",
    response_headers=[
        ResponseHeader(
            name="RDQ-Outcome",
            description="added, skipped, replaced or extended",
            documentation_only=True,
        )
    ],
    responses={
        200: ResponseSpec(
            data_container=TaskDoc,
            description="Already submitted, or folded into the task that holds the dedup key",
            generate_examples=False,
        ),
        **errors(400, 409, 413, 415, 422),
    },
    tags=["tasks"],
)
async def submit_task(
    request: Request[Any, Any, Any], data: JSONBody[SubmitRequest]
) -> Response[TaskDoc]:
    node = node_of(request)
    raw: Any = whole_numbers(await request.json(), SubmitRequest)
    if not isinstance(raw, dict):
        raise ApiError(422, "validation_error", "the body must be a JSON object", "body")
    for name in _READ_ONLY_FIELDS:
        if name in raw:
            raise ApiError(422, "validation_error", "is set by rdq and cannot be submitted", name)
    bounds.check_depth(raw.get("payload"), "payload")
    unknown = {k: v for k, v in raw.items() if k not in _KNOWN_FIELDS}
    for name, value in unknown.items():
        bounds.check_depth(value, name)
    raw.pop("delay", None)
    raw.pop("format_version", None)
    raw.pop("force", None)
    for name in _DEDUP_FIELDS:  # how to admit it, not the task
        raw.pop(name, None)
    try:  # a window or age under a microsecond (0 included): none
        dedup = dedup_of(
            data.dedup_key,
            _seconds_or_none(data.dedup_window),
            data.dedup_mode,
            _seconds_or_none(data.dedup_max_age),
        )
    except ValidationError as exc:  # fields each valid, that do not go together
        raise ApiError(400, "bad_dedup", exc.message, exc.field) from None
    app = node.engine_app
    queue = data.queue
    if app is not None and "queue" not in raw:  # the handler's queue, as the client does
        queue = app.handler_queue(data.handler_ref) or data.queue
    if app is not None and app.handler_names and not data.force:
        named = queue if "queue" in raw else None  # a typo can only be in a queue named
        _check_known(app, data.handler_ref, named, node.settings.queues)
    raw["id"] = data.id or new_task_ids(1)[0]
    raw["queue"] = queue
    task = envelope_from_builtins(raw)
    if app is not None:  # the keys its dependency and limits give it, as a Client would
        task = task_keys_for(app, task)
    by_reference = node.storage.capabilities().payload_refs
    if not by_reference:  # else checked once the payload is sealed and kept by reference
        bounds.check_task(task)
        bounds.check_submitted_size(task)
    if is_callback_ref(task.handler_ref):
        try:
            check_callback_url(task.handler_ref, node.settings.callbacks)
        except CallbackBlocked as exc:
            raise ApiError(422, "validation_error", str(exc), "handler_ref") from None
    delay = timedelta(seconds=data.delay) if data.delay else None
    may_read = request.state.principal.can("read")
    submitted = task
    wanted = app.queue_config(task.queue).encrypt if app is not None else None
    try:
        task = sealed_for(task, node.keys, wanted)
    except ConfigError as exc:
        raise ApiError(503, "not_configured", exc.message, "payload") from None
    blob = None
    if by_reference:  # sealed first, then above the inline limit: by reference
        task, blob = await node.blobs.offload(task)
        bounds.check_task(task)
        bounds.check_submitted_size(task)
    if app is not None:
        await node.limit_controls.ensure(node.storage, app.limit_plan, [task])
    if dedup is not None:
        answer = await _admit(
            request, task, dedup, delay, id_given=data.id is not None, echo=submitted
        )
        await node.blobs.keep([blob])
        return answer
    try:
        stored = await node.storage.enqueue(task, delay=delay)
    except IDConflict:
        if may_read:
            raise
        # without the read right, a submit must not tell which queue holds a foreign id
        raise ApiError(409, "id_conflict", "the task id exists in another queue", "id") from None
    await node.blobs.keep([blob])
    if not stored and not may_read:
        # the stored task (its payload, attempts, tracebacks) is for readers only: echo
        # what this caller submitted
        return Response(envelope_to_builtins(submitted), status_code=200)  # type: ignore[arg-type]
    current = await node.admin.get(task.id)
    outcome = {OUTCOME_HEADER: "added" if stored else "skipped"}
    return Response(
        task_body(request, current), status_code=201 if stored else 200, headers=outcome
    )


OUTCOME_HEADER = "RDQ-Outcome"


def _seconds_or_none(seconds: float | None) -> float | None:
    return seconds if seconds is not None and seconds >= 1e-6 else None


_DEDUP_FIELDS = ("dedup_key", "dedup_window", "dedup_mode", "dedup_max_age")


async def _admit(
    request: Request[Any, Any, Any],
    task: Envelope,
    dedup: Dedup,
    delay: timedelta | None,
    *,
    id_given: bool,
    echo: Envelope,
) -> Response[Any]:
    """A submission under a dedup key: the holder's envelope, 201 when it was added (200
    otherwise), and what happened in ``RDQ-Outcome``; ``echo`` (what the caller submitted, its
    payload inline and clear) to a caller without the read right."""
    node = node_of(request)
    may_read = request.state.principal.can("read")
    try:
        admitted = await admit_under_key(
            node.storage,
            task,
            dedup,
            delay,
            actor=principal_owner(request),
            sinks=node.admin.sinks,
            id_given=id_given,
        )
    except IDConflict as conflict:
        if may_read:
            raise
        what = "dedup key is held" if isinstance(conflict, DedupConflict) else "task id exists"
        raise ApiError(409, "id_conflict", f"the {what} in another queue", "id") from None
    outcome = admitted.outcome.value
    status = 201 if outcome == "added" else 200
    headers = {OUTCOME_HEADER: outcome}
    if not may_read:  # the stored task is for readers only: what this caller submitted
        echoed = msgspec.structs.replace(echo, id=admitted.task_id)
        return Response(envelope_to_builtins(echoed), status_code=status, headers=headers)
    current = await node.admin.get(admitted.task_id)
    return Response(task_body(request, current), status_code=status, headers=headers)


def _check_known(app: App, ref: str, queue: str | None, worked: Sequence[str]) -> None:
    """A node with an application refuses what it does not know, as ``rdq.Client`` does: a
    handler it cannot run (a callback URL is checked against the allow-list instead) and a
    queue neither it nor the node serves."""
    escape = '"force": true'
    if not is_callback_ref(ref) and not app.knows(ref):
        raise ValidationError(unknown_handler(app, ref, escape=escape), field="handler_ref")
    if queue is not None and queue not in app.queues and queue not in worked:
        raise ValidationError(unknown_queue(app, queue, worked, escape=escape), field="queue")


@get(
    "/v1/tasks/{task_id:str}",
    opt={"right": "read"},
    summary="A task with its full attempt history",
    description="Any status. Each attempt carries its error and, for failures, the traceback.",
    responses=errors(404, 422),
    tags=["tasks"],
)
async def get_task(
    request: Request[Any, Any, Any],
    task_id: Annotated[
        str,
        PathParameter(min_length=1, max_length=bounds.MAX_ID_LENGTH, pattern=TASK_ID_PATTERN),
    ],
) -> TaskDoc:
    task = await node_of(request).admin.get(task_id)
    return task_body(request, task)  # type: ignore[no-any-return]


def outlook_doc(outlook: Outlook) -> OutlookDoc:
    return msgspec.convert(msgspec.to_builtins(outlook), OutlookDoc)


@get(
    "/v1/tasks/{task_id:str}/outlook",
    opt={"right": "read"},
    summary="What holds a task and what happens next",
    description="Judged by the store's clock: the pauses, open or half-open breakers (with "
    "their outage's start) and full limits that hold a PENDING task back, whether a live "
    "worker serves its queue, who holds an IN_FLIGHT one (a silent worker, a lapsed lease "
    "awaiting its reclaim), and its attempts as the engine counts them: `charged` beside "
    "`attempt_count` (DEFERRED and INTERRUPTED attempts and failures during an outage of its "
    "dependency use up none) and what is `left` of `max_attempts` when that is known.",
    responses=errors(404, 422),
    tags=["tasks"],
)
async def task_outlook(
    request: Request[Any, Any, Any],
    task_id: Annotated[
        str,
        PathParameter(min_length=1, max_length=bounds.MAX_ID_LENGTH, pattern=TASK_ID_PATTERN),
    ],
) -> OutlookDoc:
    admin = node_of(request).admin
    (outlook,) = await admin.outlook([await admin.get(task_id, payload=False)])
    return outlook_doc(outlook)


@get(
    "/v1/queues/{queue:str}/tasks",
    opt={"right": "read"},
    summary="One page of a queue's tasks in one status",
    description="Ordered by the status time (PENDING: due at; IN_FLIGHT: lease expiry; "
    "SUCCEEDED: completed at; DEAD: dead-lettered at; CANCELLED: cancelled at), then id. Pass "
    "`next_cursor` back as `cursor`; a page may be shorter than `limit` while a cursor is "
    "returned (it also stops once its tasks encode to more than the node's `max_page_bytes`).",
    responses=errors(400, 404, 422),
    tags=["tasks"],
)
async def list_tasks(
    request: Request[Any, Any, Any],
    queue: QueuePath,
    status: Annotated[Status, QueryParameter(description="The status to list")] = Status.PENDING,
    error_type: Annotated[
        str | None, QueryParameter(max_length=bounds.MAX_ERROR_TYPE_LENGTH)
    ] = None,
    handler_ref: Annotated[
        str | None, QueryParameter(max_length=bounds.MAX_HANDLER_REF_LENGTH)
    ] = None,
    after: Time = None,
    before: Time = None,
    limit: Limit = 50,
    cursor: Cursor = None,
    include_attempts: Annotated[
        bool, QueryParameter(description="Include every attempt record")
    ] = False,
    outlook: Annotated[
        bool, QueryParameter(description="Add what holds each task and what happens next")
    ] = False,
) -> TaskPage:
    node = node_of(request)
    task_filter = TaskFilter(
        status=status,
        error_type=error_type or None,
        handler_ref=handler_ref or None,
        after=check_time(after, "after"),
        before=check_time(before, "before"),
    )
    page = Page(limit=limit, cursor=cursor or None, include_attempts=include_attempts)
    tasks, next_cursor = await node.admin.list_tasks(
        queue, task_filter, page, max_bytes=node.settings.max_page_bytes
    )
    seen = [outlook_doc(o) for o in await node.admin.outlook(tasks)] if outlook else None
    return TaskPage(
        tasks=[task_body(request, t) for t in tasks], next_cursor=next_cursor, outlook=seen
    )


@post(
    "/v1/queues/{queue:str}/tasks/cancel",
    opt={"right": "operate"},
    before_request=json_body(CancelRequest),
    status_code=200,
    summary="Cancel pending tasks, or revoke running ones",
    description="Select by `ids` or `filter` (exactly one of them; both or neither is a 422). "
    "A cancelled PENDING task never runs; an IN_FLIGHT one's claim is revoked, so its worker "
    "abandons it at its next heartbeat or resolution. `dry_run` only counts. Every cancel is "
    "audited with the token's owner. Unknown queues, skipped ids and hints as for a redrive.",
    responses=errors(400, 404, 413, 415, 422),
    tags=["tasks"],
)
async def cancel_tasks(
    request: Request[Any, Any, Any], queue: QueuePath, data: JSONBody[CancelRequest]
) -> ActionResult:
    node = node_of(request)
    chosen = selection(data.ids, data.filter)
    if isinstance(chosen, list):
        selector = TaskSelector(ids=list(chosen))
    else:
        selector = TaskSelector(
            filter=TaskFilter(
                status=Status(chosen.status),
                error_type=chosen.error_type,
                handler_ref=chosen.handler_ref,
                after=check_time(chosen.after, "filter.after"),
                before=check_time(chosen.before, "filter.before"),
            )
        )

    async def run() -> ActionReport:
        return await node.admin.act(
            "cancel", queue, selector, actor=principal_owner(request), reason=data.reason
        )

    return await act_on(
        node, "cancel", queue, selector, force=data.force, dry_run=data.dry_run, run=run
    )
