"""The rdq server node: HTTP API, DLQ web UI and a worker for HTTP callbacks.

Install with ``pip install 'rdq-core[server]'`` and run ``rdq server --storage URL``; embed
with :func:`create_app` (an ASGI app) and :func:`load_settings`; an embedded worker delivers
HTTP callback tasks with :class:`HttpCallbackInvoker`.

- ``_app``: the Litestar application (API, console, OpenAPI, the node's worker);
  ``_settings``: its settings (TOML, environment, flags); ``_node``: what every request
  handler shares; ``_upkeep``: the node's own registration and paced redrives;
  ``_gauges``: the queue, breaker and pause gauges ``/metrics`` serves, read from the store;
- ``_api``: the API's router, one module per area (``_api_tasks``, ``_api_dlq``,
  ``_api_retention``, ``_api_flow``, ``_api_fleet``, ``_api_ops``, ``_api_access``: who a
  token is, users and keys) and what they share (``_api_common``); ``_payloads``: what a role
  sees of a payload;
- ``_models``, ``_task_models``, ``_flow_models``, ``_fields``: the request and response
  bodies (they generate the OpenAPI document, refined in ``_openapi``); ``_body``: reading
  JSON bodies; ``_errors``: the one error shape;
- ``_auth``: tokens, roles and rights, the console's session and CSRF;
- ``_callbacks``, ``_addresses``: delivering HTTP callback tasks, and the SSRF guard;
- ``_ui``: the operator console.
"""

from rdq.server._app import create_app
from rdq.server._callbacks import HttpCallbackInvoker
from rdq.server._settings import (
    ServerSettings,
    TokenSpec,
    load_settings,
    parse_token_flag,
    worked_queues,
)

__all__ = [
    "HttpCallbackInvoker",
    "ServerSettings",
    "TokenSpec",
    "create_app",
    "load_settings",
    "parse_token_flag",
    "worked_queues",
]
