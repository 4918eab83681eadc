"""The HTTP/JSON API v1: tasks, queues, the DLQ, the audit trail, operational endpoints."""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler

from rdq.server._api_dlq import dlq_groups, list_dlq, purge, redrive
from rdq.server._api_ops import healthz, list_audit, list_queues, metrics, queue_stats, readyz
from rdq.server._api_tasks import cancel_tasks, get_task, list_tasks, submit_task
from rdq.server._node import Node

__all__ = ["api_handlers", "principal_guard"]


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


api_handlers = [
    submit_task,
    get_task,
    list_tasks,
    cancel_tasks,
    list_queues,
    queue_stats,
    list_dlq,
    dlq_groups,
    redrive,
    purge,
    list_audit,
    healthz,
    readyz,
    metrics,
]
