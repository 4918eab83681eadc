"""What the API modules share: response specs, path and query parameters, and conversions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import msgspec
from litestar import Request
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import PathParameter, QueryParameter

from rdq.admin import ActionReport, Preview, TaskSelector
from rdq.audit import Action
from rdq.errors import ValidationError
from rdq.server._errors import ErrorBody
from rdq.server._models import ActionResult, SkippedDoc
from rdq.server._node import Node
from rdq.server._payloads import shown
from rdq.spi import Envelope, Selector, bounds, envelope_to_builtins

__all__ = [
    "QUEUE_PATTERN",
    "Cursor",
    "Limit",
    "QueuePath",
    "QueueQuery",
    "Time",
    "act_on",
    "action_result",
    "errors",
    "node_of",
    "principal_owner",
    "selection",
    "task_body",
]

_DESCRIPTIONS = {
    400: "Malformed JSON or an unusable cursor",
    401: "No valid bearer token",
    403: "The token lacks the right",
    404: "Not found",
    409: "The id exists in another queue",
    413: "The body is larger than the node accepts",
    415: "The body is not sent as application/json",
    422: "Invalid input (the error names the field)",
    501: "The storage does not offer this operation",
    503: "The storage is unavailable or did not answer in time",
}


def errors(*statuses: int, secured: bool = True) -> dict[int, ResponseSpec]:
    """Response specs for ``statuses``, plus 401/403 when ``secured`` and 503 always."""
    extra = (401, 403, 503) if secured else (503,)
    return {
        s: ResponseSpec(
            data_container=ErrorBody, description=_DESCRIPTIONS[s], generate_examples=False
        )
        for s in (*statuses, *extra)
    }


QUEUE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._\-:]*$"
QueuePath = Annotated[
    str,
    PathParameter(min_length=1, max_length=bounds.MAX_QUEUE_LENGTH, pattern=QUEUE_PATTERN),
]
QueueQuery = Annotated[
    str | None,
    QueryParameter(
        max_length=bounds.MAX_QUEUE_LENGTH,
        pattern=r"^([A-Za-z0-9][A-Za-z0-9._\-:]*)?$",
        description="Only this queue (empty: every queue)",
    ),
]
"""A queue named in a query to narrow a listing: a queue's name, or empty for every queue."""
Limit = Annotated[int, QueryParameter(ge=1, le=bounds.MAX_LIMIT)]
Cursor = Annotated[
    str | None,
    QueryParameter(
        max_length=4096,
        description="The `next_cursor` of the previous page, as it was given: any other "
        "text is a 400 `stale_cursor` (a cursor is opaque, and bound to its queue and filter)",
    ),
]
Time = Annotated[
    str | None,
    QueryParameter(format="date-time", max_length=64, description="RFC 3339 with offset"),
]
"""A time in a query: RFC 3339 text, parsed by ``check_time`` (never a number of seconds)."""


def node_of(request: Request[Any, Any, Any]) -> Node:
    node: Node = request.app.state.node
    return node


def principal_owner(request: Request[Any, Any, Any]) -> str:
    """Who acts, as the audit names it: the token's owner and its role."""
    actor: str = request.state.principal.actor
    return actor


def task_body(request: Request[Any, Any, Any], task: Envelope) -> Any:
    """The JSON form of a task (unknown fields flat beside the known ones) as the request's
    principal may see it: its payload opened, or withheld with ``payload_state`` saying why
    (see :mod:`rdq.server._payloads`)."""
    principal = request.state.principal
    seen, state = shown(task, principal.can("payloads"), node_of(request).keys)
    body = envelope_to_builtins(seen)
    if state != "clear":
        body["payload_state"] = state
    return body


def action_result(
    action: Action,
    queue: str,
    count: int | ActionReport,
    dry_run: bool,
    seen: Preview | None = None,
) -> ActionResult:
    skipped = (
        [msgspec.convert(msgspec.to_builtins(s), SkippedDoc) for s in seen.skipped] if seen else []
    )
    report = count if isinstance(count, ActionReport) else None
    return ActionResult(
        action=action,
        queue=queue,
        count=report.done if report is not None else int(count),  # type: ignore[arg-type]
        dry_run=dry_run,
        matched=report.matched if report is not None else None,
        gone=report.gone if report is not None else None,
        archived=report.archived if report is not None and report.where else None,
        archive=report.where if report is not None else None,
        skipped=skipped,
        hint=seen.hint if seen is not None else None,
    )


async def act_on(
    node: Node,
    action: Action,
    queue: str,
    selector: Selector | TaskSelector,
    *,
    force: bool,
    dry_run: bool,
    run: Callable[[], Awaitable[int | ActionReport]],
) -> ActionResult:
    """An action's answer: the queue checked (``unknown_name`` unless ``force``), then a dry
    run's count, or the action (``run``) — skipping nothing when the named ids hold nothing to
    act on — with the named ids it did not act on and, when nothing matched, a hint."""
    bounds.check_queue(queue)
    if not force:
        await node.admin.check_names(queue)
    if dry_run or selector.ids is not None:
        seen = await node.admin.preview(action, queue, selector)
        if dry_run or seen.count == 0:
            return action_result(action, queue, seen.count, dry_run, seen)
        return action_result(action, queue, await run(), False, seen)
    done = await run()
    count = done.done if isinstance(done, ActionReport) else done
    hinted = await node.admin.preview(action, queue, selector) if count == 0 else None
    return action_result(action, queue, done, False, hinted)


F = TypeVar("F")


def selection(ids: list[str] | None, chosen_filter: F | None) -> list[str] | F:
    """What an action request (redrive, purge, cancel) selects: its ``ids`` or its
    ``filter``, exactly one of them. ``ValidationError`` (field ``ids``) when both or neither
    are given, or the ids are an empty list."""
    if ids is not None and chosen_filter is not None:
        raise ValidationError("give either ids or filter (exactly one)", field="ids")
    if ids is not None:
        if not ids:
            raise ValidationError("must not be empty", field="ids")
        return ids
    if chosen_filter is None:
        raise ValidationError("give either ids or filter (exactly one)", field="ids")
    return chosen_filter
