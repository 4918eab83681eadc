"""Builds the Litestar application of a node: API, web UI, OpenAPI, and the node's worker."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Literal

import msgspec
from litestar import Litestar
from litestar.datastructures import MutableScopeHeaders
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig
from litestar.types import Message, Scope

import rdq.metrics  # noqa: F401 - registers the metrics /metrics serves
from rdq.app import App
from rdq.audit import AuditSink
from rdq.errors import ConfigError, RdqError
from rdq.keys import Keyring
from rdq.logging import get_logger
from rdq.plugins import open_storage
from rdq.server._api import api_handlers, known_query_guard, principal_guard
from rdq.server._callbacks import HttpCallbackInvoker
from rdq.server._errors import exception_handlers
from rdq.server._node import Node
from rdq.server._openapi import SWAGGER_ASSETS, openapi_config, refine, swagger_assets
from rdq.server._settings import ServerSettings, worked_queues
from rdq.server._ui import jinja_filters, ui_router
from rdq.spi import Storage
from rdq.worker import Worker

__all__ = ["create_app"]

_HERE = Path(__file__).parent
_log = get_logger("rdq.server")


def create_app(
    settings: ServerSettings,
    *,
    storage: Storage | None = None,
    engine_app: App | None = None,
    audit_sinks: Sequence[AuditSink] = (),
    keys: Keyring | Literal["env"] | None = "env",
) -> Litestar:
    """The ASGI app of a node.

    ``storage`` is used as given (already connected, and left open) if passed; otherwise the
    node opens ``settings.storage`` at startup and closes it at shutdown. When
    ``settings.work`` is set the node also runs an :class:`rdq.Worker` on
    ``settings.queues`` (none named: ``engine_app``'s queues, else ``default``), with HTTP
    callbacks registered for ``http``/``https`` handler refs on ``engine_app`` (a fresh
    :class:`rdq.App` if not given); that worker also runs the app's schedules whose queue is
    among ``settings.queues`` (one task per tick, however many nodes and workers share the
    store). ``keys`` (default: the keyring the environment configures, see
    :meth:`rdq.keys.Keyring.from_env`) seals what is submitted through the node, opens
    payloads for its worker and for the roles that may read them. Raises ``ConfigError``
    when no token is configured."""
    keyring = Keyring.from_env() if keys == "env" else keys
    if not settings.tokens:
        raise ConfigError(
            "configure at least one token (--token, RDQ_SERVER_TOKENS or [[server.tokens]])",
            key="server.tokens",
        )
    if storage is None and not settings.storage:
        raise ConfigError("no storage URL (--storage or RDQ_STORAGE)", key="server.storage")
    settings = msgspec.structs.replace(settings, queues=worked_queues(settings, engine_app))

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            store = storage
            if store is None:
                url = settings.storage or ""
                try:
                    store = await stack.enter_async_context(open_storage(url))
                except RdqError as exc:
                    # One line an operator reads first, above the server's traceback.
                    _log.error("the node cannot open its storage", error=str(exc))
                    raise
            if settings.migrate:
                await store.migrate()
            node = Node(
                settings, store, audit_sinks=audit_sinks, engine_app=engine_app, keys=keyring
            )
            app.state.node = node
            _warn_about(settings, node, engine_app)
            await stack.enter_async_context(_upkeep(node))
            if settings.work and settings.queues:
                await stack.enter_async_context(_working(settings, store, engine_app, keyring))
            _log.info(
                "node started",
                queues=settings.queues,
                work=settings.work,
                payload_keys=keyring.versions if keyring is not None else [],
                active_key=keyring.active if keyring is not None else None,
            )
            yield
        _log.info("node stopped")

    openapi = openapi_config(settings.openapi_ui)
    static = create_static_files_router(
        path="/ui/static", directories=[_HERE / "static"], include_in_schema=False
    )
    routers = [*api_handlers, ui_router, static]
    assets = swagger_assets() if settings.openapi_ui else None
    if settings.openapi_ui and assets is None:
        raise ConfigError(
            "the Swagger UI's files are missing: pip install 'rdq-core[server]'",
            key="server.openapi_ui",
        )
    if assets is not None:
        routers.append(
            create_static_files_router(
                path=SWAGGER_ASSETS, directories=[assets], include_in_schema=False
            )
        )
    app = Litestar(
        route_handlers=routers,
        guards=[principal_guard, known_query_guard],
        exception_handlers=exception_handlers,
        openapi_config=openapi,
        template_config=TemplateConfig(
            directory=_HERE / "templates",
            engine=JinjaTemplateEngine,
            engine_callback=_add_filters,
        ),
        request_max_body_size=settings.max_body_bytes,
        before_send=[_nosniff],
        lifespan=[lifespan],
        logging_config=None,
    )
    knows = engine_app if engine_app is not None and engine_app.handler_names else None
    probes = ["/healthz", "/readyz"]
    refine(
        app,
        knows,
        settings.queues,
        callbacks=bool(settings.callbacks.allow_hosts),
        open_paths=[
            *(probes if settings.open_health else []),
            *(["/metrics"] if settings.open_metrics else []),
        ],
        closed_paths=[
            *([] if settings.open_health else probes),
            *([] if settings.open_metrics else ["/metrics"]),
        ],
    )
    return app


@contextlib.asynccontextmanager
async def _working(
    settings: ServerSettings, storage: Storage, engine_app: App | None, keys: Keyring | None
) -> AsyncIterator[Worker]:
    """Run a worker on the node's queues until the block exits, then stop it gracefully."""
    app = engine_app or App()
    invoker = HttpCallbackInvoker(settings.callbacks)
    app.register_scheme("http", invoker)
    app.register_scheme("https", invoker)
    worker = Worker(
        app,
        storage,
        queues=settings.queues,
        max_unrecorded=settings.max_unrecorded,
        keys=keys,
    )
    task = asyncio.create_task(worker.run(), name="rdq-server-worker")
    try:
        yield worker
    finally:
        worker.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await invoker.aclose()


@contextlib.asynccontextmanager
async def _upkeep(node: Node) -> AsyncIterator[None]:
    """Run the node's upkeep (its registration, paced redrives) until the block exits."""
    stopping = asyncio.Event()
    task = asyncio.create_task(node.upkeep.run(stopping), name="rdq-node-upkeep")
    try:
        yield
    finally:
        stopping.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await node.upkeep.close()


async def _nosniff(message: Message, scope: Scope) -> None:
    """Every response says ``X-Content-Type-Options: nosniff``: the error answers too, which
    exception handlers and the router make outside a route's own response headers."""
    if message["type"] == "http.response.start":
        MutableScopeHeaders.from_message(message)["X-Content-Type-Options"] = "nosniff"


def _warn_about(settings: ServerSettings, node: Node, engine_app: App | None) -> None:
    """Say at start-up what the configuration leaves weaker than it could be."""
    if engine_app is not None:
        worked = set(settings.queues) if settings.work else set()
        for schedule in engine_app.schedules.values():
            queue = engine_app.schedule_queue(schedule)
            if queue not in worked:
                _log.warning(
                    "this node does not run a schedule: it does not work the schedule's queue "
                    "(a worker or node that works it does)",
                    schedule=schedule.name,
                    queue=queue,
                )
    if settings.work and settings.callbacks.allow_hosts and not settings.callbacks.secrets:
        _log.warning(
            "callbacks are sent unsigned: no callback secret is configured "
            "(set RDQ_CALLBACK_SECRET or [server.callbacks] secrets)"
        )
    if engine_app is not None and node.keys is None:
        sealed = [q for q in engine_app.queues if engine_app.queue_config(q).encrypt]
        if sealed:
            _log.warning(
                "queues that encrypt their payloads get no submit through this node, and "
                "its worker and console open no payload: it holds no payload key "
                "(set RDQ_PAYLOAD_KEYS, RDQ_PAYLOAD_KEYS_FILE or RDQ_PAYLOAD_KEYS_PROVIDER)",
                queues=sealed,
            )
    if node.auth.ephemeral_owners:
        _log.warning(
            "UI sessions of tokens configured only by sha256 hold on this node until it "
            "restarts: set session_secret (RDQ_SESSION_SECRET), the same on every node",
            owners=node.auth.ephemeral_owners,
        )


def _add_filters(engine: JinjaTemplateEngine) -> None:
    engine.engine.filters.update(jinja_filters)
