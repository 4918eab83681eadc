"""The API's queue, audit and operational endpoints."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get
from litestar.params import QueryParameter
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from rdq.errors import NotFound
from rdq.server._api_common import Cursor, Limit, QueuePath, QueueQuery, Time, errors, node_of
from rdq.server._body import check_time
from rdq.server._models import AuditDoc, AuditPage, QueueList, StatsDoc
from rdq.spi import AuditEntry, AuditFilter, Page, Stats, bounds

__all__ = ["healthz", "list_audit", "list_queues", "metrics", "queue_stats", "readyz"]


def stats_doc(stats: Stats) -> StatsDoc:
    fields = msgspec.structs.asdict(stats)
    fields["estimated"] = list(stats.estimated)
    return StatsDoc(**fields)


@get(
    "/v1/queues",
    opt={"right": "read"},
    summary="Every queue, with its statistics",
    description="Every queue the store holds a task for (in any status), and the queues this "
    "node works even when empty, by name. Counts above the store's exact-count threshold may "
    "be estimates: `estimated` names them.",
    responses=errors(),
    tags=["queues"],
)
async def list_queues(request: Request[Any, Any, Any]) -> QueueList:
    return QueueList(queues=[stats_doc(s) for s in await node_of(request).queues()])


@get(
    "/v1/queues/{queue:str}/stats",
    opt={"right": "read"},
    summary="Statistics of one queue",
    responses=errors(404, 422),
    tags=["queues"],
)
async def queue_stats(request: Request[Any, Any, Any], queue: QueuePath) -> StatsDoc:
    return stats_doc(await node_of(request).admin.stats(queue))


@get(
    "/v1/audit",
    opt={"right": "read"},
    summary="The audit trail: every redrive, purge and cancel",
    description="Newest first. Shared by every node and CLI on the same store. Pass "
    "`next_cursor` back as `cursor` for older entries.",
    responses=errors(400, 422),
    tags=["audit"],
)
async def list_audit(
    request: Request[Any, Any, Any],
    queue: QueueQuery = None,
    action: Annotated[str | None, QueryParameter(max_length=bounds.MAX_AUDIT_WORD_LENGTH)] = None,
    actor: Annotated[str | None, QueryParameter(max_length=bounds.MAX_AUDIT_WORD_LENGTH)] = None,
    after: Time = None,
    before: Time = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> AuditPage:
    audit_filter = AuditFilter(
        queue=queue or None,
        action=action or None,
        actor=actor or None,
        after=check_time(after, "after"),
        before=check_time(before, "before"),
    )
    entries, next_cursor = await node_of(request).admin.list_audit(
        audit_filter if audit_filter != AuditFilter() else None,
        Page(limit=limit, cursor=cursor or None),
    )
    return AuditPage(entries=[audit_doc(e) for e in entries], next_cursor=next_cursor)


def audit_doc(entry: AuditEntry) -> AuditDoc:
    return AuditDoc(
        id=entry.id,
        time=entry.time,
        actor=entry.actor,
        action=entry.action,
        queue=entry.queue,
        selector=entry.selector,
        count=entry.count,
        reason=entry.reason,
        error=entry.error,
    )


class Health(msgspec.Struct):
    status: str


_OPTIONAL_TOKEN: list[dict[str, list[str]]] = [{}, {"bearer": []}]
"""A token may be needed, by configuration: health checks are open unless the node sets
``open_health = false``, metrics need ``read`` unless it sets ``open_metrics = true``."""


@get(
    "/healthz",
    opt={"right": "health"},
    summary="The process is up",
    description="Open unless the node is configured with `open_health = false`.",
    security=_OPTIONAL_TOKEN,
    responses=errors(),
    tags=["ops"],
)
async def healthz() -> Health:
    return Health(status="ok")


@get(
    "/readyz",
    opt={"right": "health"},
    summary="The storage answers",
    description="503 `storage_unavailable` when the storage cannot be reached or does not "
    "answer within the node's `request_timeout`. Open unless `open_health = false`.",
    security=_OPTIONAL_TOKEN,
    responses=errors(),
    tags=["ops"],
)
async def readyz(request: Request[Any, Any, Any]) -> Health:
    with contextlib.suppress(NotFound):
        await node_of(request).storage.get("rdq-readiness-probe")
    return Health(status="ready")


@get(
    "/metrics",
    opt={"right": "metrics"},
    summary="Prometheus metrics",
    description="Needs a `read` token unless the node sets `open_metrics = true`. The queue "
    "gauges (`rdq_pending`, `rdq_dlq_depth`, …), `rdq_breaker_state`, `rdq_held` and "
    "`rdq_paused` are read from the store (every queue, whether this node works it or not), "
    "at most every 10 seconds.",
    media_type=CONTENT_TYPE_LATEST,
    security=_OPTIONAL_TOKEN,
    responses=errors(),
    tags=["ops"],
)
async def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    await node_of(request).gauges.refresh()
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
