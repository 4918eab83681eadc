"""The API's flow-control endpoints: a queue's controls, pause and resume, breakers (listed,
opened and closed by hand), retry now, and paced redrives (listed, followed, cancelled).

Listings answer 200 with ``unsupported`` set (and nothing listed) from a store without the
``control`` capability, so a client can say what the store lacks; actions answer 501
``not_implemented`` naming it. Every action is audited by the admin layer with the token's
owner.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, get, post
from litestar.params import JSONBody, PathParameter

from rdq.admin import Operation, TaskSelector
from rdq.errors import Unsupported, ValidationError
from rdq.flow import (
    BreakerView,
    LimitView,
    breaker_view,
    control_builtins,
    control_key,
    held_by,
)
from rdq.server._api_common import (
    QueuePath,
    QueueQuery,
    act_on,
    errors,
    node_of,
    principal_owner,
    selection,
)
from rdq.server._body import check_time, json_body
from rdq.server._fields import VISIBLE
from rdq.server._models import (
    ActionResult,
    BreakerDoc,
    BreakerList,
    BreakerRequest,
    ControlDoc,
    ControlList,
    LimitDoc,
    LimitList,
    OperationDoc,
    PausedDoc,
    PauseList,
    PauseRequest,
    ReasonRequest,
    RedriveList,
    RetryNowRequest,
)
from rdq.server._node import Node
from rdq.spi import Control, Status, TaskFilter, bounds, require

__all__ = [
    "breaker_handlers",
    "cancel_redrive",
    "get_redrive",
    "list_breakers",
    "list_controls",
    "list_limits",
    "list_pauses",
    "list_redrives",
    "pause",
    "queue_limits",
    "queue_redrives",
    "resume",
    "retry_now",
]

KeyPath = Annotated[
    str,
    PathParameter(
        min_length=1,
        max_length=bounds.MAX_CONTROL_KEY_LENGTH,
        pattern=f"^(handler|dep):{VISIBLE.replace('^', '^/', 1)}+$",
        description="`handler:<ref>` or `dep:<name>` (URL-encoded); a key holding a `/` (a "
        "callback URL's handler) is named in the body of `/breakers/open` instead",
    ),
]
OpPath = Annotated[str, PathParameter(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9]+$")]


def control_doc(control: Control) -> ControlDoc:
    return msgspec.convert(control_builtins(control), ControlDoc)


def breaker_doc(view: BreakerView) -> BreakerDoc:
    return msgspec.convert(msgspec.to_builtins(view), BreakerDoc)


def limit_doc(view: LimitView) -> LimitDoc:
    return msgspec.convert(msgspec.to_builtins(view), LimitDoc)


def operation_doc(op: Operation) -> OperationDoc:
    return msgspec.convert(msgspec.to_builtins(op), OperationDoc)


# --- controls, pause, resume ----------------------------------------------------------------


@get(
    "/v1/queues/{queue:str}/controls",
    opt={"right": "read"},
    summary="A queue's controls: its pauses, breakers and limits",
    description="Every control record of the queue (paced redrives are listed by "
    "`/redrives`), by key. A store without the `control` capability answers an empty list "
    "with `unsupported` saying so.",
    responses=errors(404, 422),
    tags=["flow"],
)
async def list_controls(request: Request[Any, Any, Any], queue: QueuePath) -> ControlList:
    try:
        found = await node_of(request).admin.controls(queue)
    except Unsupported as exc:
        return ControlList(queue=queue, controls=[], unsupported=str(exc))
    return ControlList(queue=queue, controls=[control_doc(c) for c in found])


_LIMITS_DESCRIPTION = (
    "Each limit the engine declared (a queue's, a handler's, a named key's, a per-value "
    "limit's with its busiest values), as the store enforces it now: `in_use` tasks of its "
    "key hold a live lease, `saturated` keys are at their concurrency limit, `current_rate` "
    "is the rate now (lowered after a RetryAfter until `lowered_until`, or ramping after an "
    "outage), `waiting` due tasks carry its key (of the first 1,000 due). A store without the "
    "`control` capability answers an empty list with `unsupported` saying so."
)


async def _limits(request: Request[Any, Any, Any], queue: str | None) -> LimitList:
    try:
        found = await node_of(request).admin.limits(queue)
    except Unsupported as exc:
        return LimitList(limits=[], unsupported=str(exc))
    return LimitList(limits=[limit_doc(v) for v in found])


@get(
    "/v1/queues/{queue:str}/limits",
    opt={"right": "read"},
    summary="A queue's limits: each one, its use now, what waits on it",
    description=_LIMITS_DESCRIPTION,
    responses=errors(404, 422),
    tags=["flow"],
)
async def queue_limits(request: Request[Any, Any, Any], queue: QueuePath) -> LimitList:
    return await _limits(request, queue)


@get(
    "/v1/limits",
    opt={"right": "read"},
    summary="Every limit of every queue",
    description=_LIMITS_DESCRIPTION,
    responses=errors(404, 422),
    tags=["flow"],
)
async def list_limits(
    request: Request[Any, Any, Any],
    queue: QueueQuery = None,
) -> LimitList:
    return await _limits(request, queue or None)


def _key(data: PauseRequest | BreakerRequest) -> str:
    """The key a pause or breaker request names; a 422 naming the field otherwise."""
    if data.handler is not None and data.dependency is not None:
        raise ValidationError("name a handler or a dependency, not both", field="dependency")
    return control_key(handler=data.handler, dependency=data.dependency)


async def _pause(
    request: Request[Any, Any, Any], queue: str, data: PauseRequest, paused: bool
) -> ControlDoc:
    admin = node_of(request).admin
    bounds.check_queue(queue)
    key = _key(data)
    require(admin.storage, "control", "pauses")
    if not data.force:
        await admin.check_names(queue, key)
    run = admin.pause if paused else admin.resume
    control = await run(queue, key, actor=principal_owner(request), reason=data.reason)
    return control_doc(control)


@post(
    "/v1/queues/{queue:str}/pause",
    opt={"right": "operate"},
    before_request=json_body(PauseRequest),
    status_code=200,
    summary="Pause a queue, a handler or a dependency",
    description="With neither `handler` nor `dependency`, the whole queue. No worker or node "
    "claims the paused tasks from its next claim on; they keep their attempts and submits are "
    "still accepted. Pausing what is paused changes nothing. A queue, handler or dependency "
    "nothing on the store knows is a 404 `unknown_name` naming the closest known one "
    '(`"force": true` names it for the future). Audited.',
    responses=errors(400, 404, 413, 415, 422, 501),
    tags=["flow"],
)
async def pause(
    request: Request[Any, Any, Any], queue: QueuePath, data: JSONBody[PauseRequest]
) -> ControlDoc:
    return await _pause(request, queue, data, True)


@post(
    "/v1/queues/{queue:str}/resume",
    opt={"right": "operate"},
    before_request=json_body(PauseRequest),
    status_code=200,
    summary="Lift a pause",
    description="Names what to resume as `pause` does. Audited.",
    responses=errors(400, 404, 413, 415, 422, 501),
    tags=["flow"],
)
async def resume(
    request: Request[Any, Any, Any], queue: QueuePath, data: JSONBody[PauseRequest]
) -> ControlDoc:
    return await _pause(request, queue, data, False)


@get(
    "/v1/pauses",
    opt={"right": "read"},
    summary="Every paused key of every queue",
    description="Who paused what (the whole queue `*`, `handler:<ref>`, `dep:<name>`), when "
    "and why, and the PENDING tasks each holds when that is cheap to count (a whole queue's, "
    "a handler's on a store that filters itself). A store without the `control` capability "
    "answers an empty list with `unsupported` saying so.",
    responses=errors(404, 422),
    tags=["flow"],
)
async def list_pauses(
    request: Request[Any, Any, Any],
    queue: QueueQuery = None,
) -> PauseList:
    try:
        found = await node_of(request).admin.pauses(queue or None)
    except Unsupported as exc:
        return PauseList(pauses=[], unsupported=str(exc))
    return PauseList(pauses=[msgspec.convert(msgspec.to_builtins(p), PausedDoc) for p in found])


# --- breakers -------------------------------------------------------------------------------


@get(
    "/v1/breakers",
    opt={"right": "read"},
    summary="Every breaker of every queue",
    description="Open ones first, then half-open, then closed ones that remember an outage. "
    "`held` counts the PENDING tasks an open or half-open breaker holds when that is cheap "
    "(a handler's, on a store that filters itself); `probes_left` is how many more claims a "
    "half-open one lets through fleet-wide.",
    responses=errors(404, 422),
    tags=["flow"],
)
async def list_breakers(
    request: Request[Any, Any, Any],
    queue: QueueQuery = None,
) -> BreakerList:
    try:
        found = await node_of(request).admin.breakers(queue or None)
    except Unsupported as exc:
        return BreakerList(breakers=[], unsupported=str(exc))
    return BreakerList(breakers=[breaker_doc(b) for b in found])


def _breaker_key(key: str, field: str) -> str:
    bounds.check_control_key(key, field)
    if not key.startswith(("handler:", "dep:")):
        raise ValidationError("a breaker's key is handler:<ref> or dep:<name>", field=field)
    return key


async def _set_breaker(
    request: Request[Any, Any, Any],
    queue: str,
    key: str,
    change: str,
    reason: str | None,
    force: bool = False,
) -> BreakerDoc:
    node = node_of(request)
    bounds.check_queue(queue)
    require(node.storage, "control", "breakers")
    if not force:
        await node.admin.check_names(queue, key)
    control = await node.admin.set_breaker(
        queue,
        key,
        "open" if change == "open" else "close",
        actor=principal_owner(request),
        reason=reason,
        config=node.breaker_config(queue),
    )
    view = breaker_view(control)
    held, more = await held_by(node.storage, queue, key)
    return breaker_doc(msgspec.structs.replace(view, held=held, held_more=more))


_BY_HAND = {
    "open": "Open a breaker by hand: its key's tasks are held until it is closed by hand (the "
    "engine does not probe it).",
    "close": "Close a breaker (open or half-open, by the engine or by hand): the outage is "
    "over and its held tasks are let go over the ramp. Closing a closed breaker changes "
    "nothing.",
}


def _by_path(change: str) -> Any:
    @post(
        f"/v1/queues/{{queue:str}}/breakers/{{key:str}}/{change}",
        opt={"right": "operate"},
        before_request=json_body(ReasonRequest),
        status_code=200,
        summary=f"{change.capitalize()} a breaker by hand",
        description=_BY_HAND[change] + " A key holding a `/` (the handler of a callback URL) "
        f"is named in the body of `/breakers/{change}` instead. A name nothing on the store "
        'knows is a 404 `unknown_name` (`"force": true` in the body names it anyway). Audited.',
        responses=errors(400, 404, 413, 415, 422, 501),
        tags=["flow"],
        name=f"breaker-{change}-by-path",
    )
    async def handler(
        request: Request[Any, Any, Any],
        queue: QueuePath,
        key: KeyPath,
        data: JSONBody[ReasonRequest],
    ) -> BreakerDoc:
        return await _set_breaker(request, queue, _breaker_key(key, "key"), change, data.reason)

    return handler


def _by_body(change: str) -> Any:
    @post(
        f"/v1/queues/{{queue:str}}/breakers/{change}",
        opt={"right": "operate"},
        before_request=json_body(BreakerRequest),
        status_code=200,
        summary=f"{change.capitalize()} a breaker named in the body",
        description=_BY_HAND[change] + " Name it by exactly one of `key` (as listed by "
        "`/v1/breakers`), `handler` and `dependency`. A name nothing on the store knows is a "
        '404 `unknown_name` (`"force": true` names it anyway). Audited.',
        responses=errors(400, 404, 413, 415, 422, 501),
        tags=["flow"],
        name=f"breaker-{change}-by-body",
    )
    async def handler(
        request: Request[Any, Any, Any], queue: QueuePath, data: JSONBody[BreakerRequest]
    ) -> BreakerDoc:
        named = [n for n in ("key", "handler", "dependency") if getattr(data, n) is not None]
        if len(named) != 1:
            raise ValidationError("give exactly one of key, handler and dependency", "key")
        key = data.key if data.key is not None else _key(data)
        return await _set_breaker(
            request, queue, _breaker_key(key, named[0]), change, data.reason, data.force
        )

    return handler


breaker_handlers = [_by_path("open"), _by_path("close"), _by_body("open"), _by_body("close")]


# --- retry now ------------------------------------------------------------------------------


@post(
    "/v1/queues/{queue:str}/retry-now",
    opt={"right": "operate"},
    before_request=json_body(RetryNowRequest),
    status_code=200,
    summary="Make waiting PENDING tasks due now",
    description="Select by `ids` or `filter` (exactly one of them); the selected PENDING "
    "tasks that wait out a backoff become due at once (others are left alone). `dry_run` "
    "only counts them. The answer names the ids it did not act on and why (`skipped`). "
    "Audited.",
    responses=errors(400, 404, 413, 415, 422, 501),
    tags=["flow"],
)
async def retry_now(
    request: Request[Any, Any, Any], queue: QueuePath, data: JSONBody[RetryNowRequest]
) -> ActionResult:
    admin = node_of(request).admin
    bounds.check_queue(queue)
    chosen = selection(data.ids, data.filter)
    if isinstance(chosen, list):
        selector = TaskSelector(ids=list(chosen))
    else:
        selector = TaskSelector(
            filter=TaskFilter(
                status=Status.PENDING,
                error_type=chosen.error_type,
                handler_ref=chosen.handler_ref,
                after=check_time(chosen.after, "filter.after"),
                before=check_time(chosen.before, "filter.before"),
            )
        )

    require(admin.storage, "control", "retry now")

    async def run() -> int:
        return await admin.retry_now(
            queue, selector, actor=principal_owner(request), reason=data.reason
        )

    return await act_on(
        node_of(request),
        "retry_now",
        queue,
        selector,
        force=data.force,
        dry_run=data.dry_run,
        run=run,
    )


# --- paced redrives -------------------------------------------------------------------------


async def _redrives(node: Node, queue: str | None) -> RedriveList:
    try:
        require(node.storage, "control", "paced redrives")
        found = await node.admin.paced_redrives(queue)
    except Unsupported as exc:
        return RedriveList(redrives=[], unsupported=str(exc))
    return RedriveList(redrives=[operation_doc(op) for op in found])


@get(
    "/v1/redrives",
    opt={"right": "read"},
    summary="Every paced redrive of every queue",
    description="Running and finished ones, newest first, with their progress (`done` of "
    "`total`) and who drives them.",
    responses=errors(),
    tags=["flow"],
)
async def list_redrives(request: Request[Any, Any, Any]) -> RedriveList:
    return await _redrives(node_of(request), None)


@get(
    "/v1/queues/{queue:str}/redrives",
    opt={"right": "read"},
    summary="The paced redrives of a queue",
    responses=errors(404, 422),
    tags=["flow"],
)
async def queue_redrives(request: Request[Any, Any, Any], queue: QueuePath) -> RedriveList:
    bounds.check_queue(queue)
    return await _redrives(node_of(request), queue)


@get(
    "/v1/queues/{queue:str}/redrives/{op_id:str}",
    opt={"right": "read"},
    summary="One paced redrive, with its progress",
    responses=errors(404, 422, 501),
    tags=["flow"],
)
async def get_redrive(
    request: Request[Any, Any, Any], queue: QueuePath, op_id: OpPath
) -> OperationDoc:
    node = node_of(request)
    bounds.check_queue(queue)
    require(node.storage, "control", "paced redrives")
    return operation_doc(await node.admin.paced_redrive(queue, op_id))


@post(
    "/v1/queues/{queue:str}/redrives/{op_id:str}/cancel",
    opt={"right": "operate"},
    before_request=json_body(ReasonRequest),
    status_code=200,
    summary="Cancel a paced redrive",
    description="It stops at its next tick (within a second, wherever it is driven); the "
    "tasks not yet returned stay in the DLQ. Cancelling a finished one changes nothing. "
    "Audited with how many were returned.",
    responses=errors(400, 404, 413, 415, 422, 501),
    tags=["flow"],
)
async def cancel_redrive(
    request: Request[Any, Any, Any],
    queue: QueuePath,
    op_id: OpPath,
    data: JSONBody[ReasonRequest],
) -> OperationDoc:
    node = node_of(request)
    bounds.check_queue(queue)
    require(node.storage, "control", "paced redrives")
    await node.admin.paced_redrive(queue, op_id)  # NotFound: a 404
    op = await node.admin.cancel_paced_redrive(
        queue, op_id, actor=principal_owner(request), reason=data.reason
    )
    return operation_doc(op)
