"""rdq: a durable retry and dead-letter queue for Python services.

The application API lives here; plugin authors use :mod:`rdq.spi`; errors are in
:mod:`rdq.errors`. See ``docs/engine.md`` for a guide::

    import rdq

    app = rdq.App()
    app.queue("emails", max_attempts=8, backoff=rdq.Backoff.exponential(base=2, cap=600))

    @app.handler("send_email", queue="emails")
    async def send_email(payload, ctx: rdq.TaskContext) -> None: ...

    async with rdq.Client.open("postgresql://…", app=app) as client:
        await client.submit("send_email", {"to": "ada@example.com"})

``rdq.Worker`` is imported on first use, so a process that only submits never loads the
worker.
"""

from typing import TYPE_CHECKING, Any

from rdq._storage_url import storage_url
from rdq.app import App, Handler, SchemeInvoker, TaskContext
from rdq.client import Client, Submission, Submitted, SyncClient
from rdq.config import Backoff, BackoffKind, Breaker, QueueConfig
from rdq.errors import (
    ConfigError,
    IDConflict,
    NotFound,
    RdqError,
    StaleClaim,
    StaleCursor,
    StorageError,
    StorageUnavailable,
    ValidationError,
)
from rdq.limiting import Concurrency, Rate
from rdq.plugins import installed_backends, open_storage
from rdq.signals import Permanent, RetryAfter, Unavailable
from rdq.spi import RetryOverride

if TYPE_CHECKING:
    from rdq.worker import Worker

__all__ = [
    "App",
    "Backoff",
    "BackoffKind",
    "Breaker",
    "Client",
    "Concurrency",
    "ConfigError",
    "Handler",
    "IDConflict",
    "NotFound",
    "Permanent",
    "QueueConfig",
    "Rate",
    "RdqError",
    "RetryAfter",
    "RetryOverride",
    "SchemeInvoker",
    "StaleClaim",
    "StaleCursor",
    "StorageError",
    "StorageUnavailable",
    "Submission",
    "Submitted",
    "SyncClient",
    "TaskContext",
    "Unavailable",
    "ValidationError",
    "Worker",
    "installed_backends",
    "open_storage",
    "storage_url",
]


def __getattr__(name: str) -> Any:
    if name == "Worker":
        from rdq.worker import Worker

        return Worker
    raise AttributeError(f"module 'rdq' has no attribute {name!r}")
