"""The HTTP/JSON API v1: tasks, queues, the DLQ, flow control (pauses, breakers, retry now,
paced redrives), the fleet (workers, rates), the audit trail, operational endpoints."""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler

from rdq.errors import ValidationError
from rdq.server._api_access import list_keys, list_users, whoami
from rdq.server._api_dlq import dlq_groups, list_dlq, purge, redrive
from rdq.server._api_fleet import list_workers, queue_rates
from rdq.server._api_flow import (
    breaker_handlers,
    cancel_redrive,
    get_redrive,
    list_breakers,
    list_controls,
    list_limits,
    list_pauses,
    list_redrives,
    pause,
    queue_limits,
    queue_redrives,
    resume,
    retry_now,
)
from rdq.server._api_ops import healthz, list_audit, list_queues, metrics, queue_stats, readyz
from rdq.server._api_retention import export_dlq, import_dlq, queue_retention
from rdq.server._api_tasks import cancel_tasks, get_task, list_tasks, submit_task, task_outlook
from rdq.server._node import Node

__all__ = ["api_handlers", "known_query_guard", "principal_guard"]

_NOT_QUERY = frozenset({"request", "state", "scope", "data", "headers", "cookies", "query", "body"})
"""Handler arguments Litestar fills from the request itself, never from the query string."""


def principal_guard(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    """Checks the bearer token against the right the handler names in ``opt["right"]``:
    ``read``, ``operate``, ``admin`` (the roles') or ``submit``; ``any`` takes every valid
    token.

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
    if right != "any" and not principal.can(right):
        raise PermissionDeniedException(principal.refusal(right))
    connection.state.principal = principal


def known_query_guard(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    """An API request names only the query parameters its endpoint takes: a misspelt filter
    (``?stauts=DEAD``) is a 422 naming it, never a silently wider listing or action. Probes
    (health, metrics) take whatever their scrapers add."""
    if handler.opt.get("right") in (None, "health", "metrics"):
        return
    taken = _query_names(handler, connection.scope.get("path_params", {}))
    unknown = sorted(set(connection.query_params) - taken)
    if unknown:
        accepted = ", ".join(sorted(taken)) or "none"
        raise ValidationError(
            f"is not a query parameter of this endpoint (it takes: {accepted})",
            field=unknown[0],
        )


def _query_names(handler: BaseRouteHandler, path_params: dict[str, Any]) -> frozenset[str]:
    names = handler.parsed_fn_signature.parameters.keys()
    return frozenset(names - _NOT_QUERY - path_params.keys())


api_handlers = [
    submit_task,
    get_task,
    task_outlook,
    list_tasks,
    cancel_tasks,
    list_queues,
    queue_stats,
    list_dlq,
    dlq_groups,
    redrive,
    purge,
    export_dlq,
    import_dlq,
    queue_retention,
    list_controls,
    pause,
    resume,
    list_pauses,
    list_breakers,
    list_limits,
    queue_limits,
    *breaker_handlers,
    retry_now,
    list_redrives,
    queue_redrives,
    get_redrive,
    cancel_redrive,
    list_workers,
    queue_rates,
    list_audit,
    healthz,
    readyz,
    metrics,
    whoami,
    list_users,
    list_keys,
]
