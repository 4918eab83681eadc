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

The package's rooms, each a package with its own map: ``worker`` (claiming and running
tasks), ``retry`` (what an attempt comes to), ``flow`` (breakers, pauses and limits),
``retention`` (how long finished tasks stay, and the archive they go to first), ``blobs``
(payloads too big for a row, by reference), ``admin``
(the operator's actions), ``server`` (the HTTP API and the console), ``cli`` (the
``rdq`` command), ``spi`` (the storage contract and everything a plugin uses).

Its modules: ``app`` (:class:`App`, the registry of queues and handlers) with ``_handlers``
(what a handler is); ``client`` (submitting) with ``_dedup`` (submitting under a dedup
key); ``config`` (queue configs from code or TOML) with ``_queue_settings`` (the settings
classes) and ``_checks``; ``schedules`` (periodic
tasks) with ``_crontime``; ``signals`` (:class:`Permanent`, :class:`RetryAfter`,
:class:`Snooze`, :class:`Unavailable`); ``errors`` (the error tree); ``plugins``
(discovering storage plugins) with ``_storage_url`` (the store used when none is named);
``callbacks`` (HTTP callback tasks: the receiver's side); ``audit`` (audit records and
recording them); ``keys`` (sealed payloads: :class:`Keyring`, versioned AES-256-GCM keys);
``scrub`` (:class:`Scrubber`, secrets taken out of error messages and tracebacks);
``logging``, ``metrics``, ``tracing``; ``_ids`` (task ids); ``_suggest`` ("did you mean", the
closest known name to a typo); ``__main__`` (``python -m rdq``).
"""

from typing import TYPE_CHECKING, Any

from rdq._storage_url import storage_url
from rdq.app import App, Handler, SchemeInvoker, TaskContext
from rdq.client import Client, Submission, Submitted, SyncClient
from rdq.config import Backoff, BackoffKind, Breaker, QueueConfig
from rdq.errors import (
    ConfigError,
    DedupConflict,
    IDConflict,
    NotFound,
    RdqError,
    StaleClaim,
    StaleCursor,
    StorageError,
    StorageUnavailable,
    ValidationError,
)
from rdq.flow import Concurrency, Rate
from rdq.keys import Keyring
from rdq.plugins import installed_backends, open_storage
from rdq.scrub import Scrubber
from rdq.signals import Permanent, RetryAfter, Snooze, Unavailable
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
    "DedupConflict",
    "Handler",
    "IDConflict",
    "Keyring",
    "NotFound",
    "Permanent",
    "QueueConfig",
    "Rate",
    "RdqError",
    "RetryAfter",
    "RetryOverride",
    "SchemeInvoker",
    "Scrubber",
    "Snooze",
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
