"""The rdq server node: HTTP API, DLQ web UI and a worker for HTTP callbacks.

Install with ``pip install 'rdq-core[server]'`` and run ``rdq server --storage URL``; embed
with :func:`create_app` (an ASGI app) and :func:`load_settings`; an embedded worker delivers
HTTP callback tasks with :class:`HttpCallbackInvoker`.
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
