"""``rdq server``: run a node (HTTP API, DLQ web UI, and a worker for HTTP callbacks)."""

from __future__ import annotations

import sys
from typing import Any

import click
import msgspec
import structlog

from rdq.cli._default import DEFAULT_STORAGE, STORAGE_ENV, chosen_storage
from rdq.errors import RdqError
from rdq.worker import DEFAULT_MAX_UNRECORDED, MAX_UNRECORDED


@click.command()
@click.option(
    "--storage",
    "storage_url",
    envvar=list(STORAGE_ENV),
    metavar="URL",
    help=f"Storage URL (env RDQ_STORAGE; default {DEFAULT_STORAGE}).",
)
@click.option(
    "--config",
    "config_path",
    envvar="RDQ_SERVER_CONFIG",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="TOML file with [server], [defaults], [queues.NAME], [schedules.NAME] tables "
    "(env RDQ_SERVER_CONFIG).",
)
@click.option("--host", default=None, help="Address to listen on (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port to listen on (default 8080).")
@click.option(
    "--token",
    "tokens",
    multiple=True,
    metavar="OWNER:GRANTS:TOKEN",
    help="A bearer token; grants joined by +: a role (viewer, operator, admin) with submit "
    "or payloads, or the earlier rights (read, submit, admin). Repeatable. "
    "Prefer RDQ_SERVER_TOKENS or the config file: flags show in process lists.",
)
@click.option(
    "--queue",
    "queues",
    multiple=True,
    help="A queue this node works (repeatable); default: the --app's queues, else 'default'.",
)
@click.option(
    "--app",
    "app_ref",
    metavar="MODULE:ATTR",
    help="An rdq.App whose handlers and queue configs this node also uses; without --queue "
    "the node works its queues, as rdq worker does.",
)
@click.option("--work/--no-work", default=None, help="Run a worker beside the API (default on).")
@click.option(
    "--max-unrecorded",
    type=int,
    default=None,
    metavar="N",
    help="Successes awaiting their batched write that may free their slot in the node's "
    f"worker (0 to {MAX_UNRECORDED}; default: {DEFAULT_MAX_UNRECORDED}, or its total "
    "concurrency if larger; a crash can "
    "leave this many plus the concurrency run but unrecorded, to run again).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    help="A callback host (or *.domain, or *) that may be called. Repeatable.",
)
@click.option(
    "--allow-network",
    "allow_networks",
    multiple=True,
    metavar="CIDR",
    help="A non-public network callbacks may reach (e.g. 127.0.0.0/8). Repeatable.",
)
@click.option("--callback-timeout", type=float, default=None, help="Seconds per callback.")
@click.option(
    "--audit-log",
    default=None,
    metavar="FILE",
    help="Append an audit record of every redrive and purge to this JSON-lines file.",
)
@click.option("--migrate", is_flag=True, default=None, help="Create or upgrade the schema first.")
@click.option(
    "--open-metrics/--protect-metrics",
    default=None,
    help="Serve /metrics without a token (default: protected).",
)
@click.option("--log-json/--log-console", default=None, help="Log format (default: by TTY).")
def server(
    storage_url: str | None,
    config_path: str | None,
    host: str | None,
    port: int | None,
    tokens: tuple[str, ...],
    queues: tuple[str, ...],
    app_ref: str | None,
    work: bool | None,
    max_unrecorded: int | None,
    allow_hosts: tuple[str, ...],
    allow_networks: tuple[str, ...],
    callback_timeout: float | None,
    audit_log: str | None,
    migrate: bool | None,
    open_metrics: bool | None,
    log_json: bool | None,
) -> None:
    """Run an rdq server node: the HTTP API (/v1, OpenAPI at /schema), the DLQ web UI (/ui),
    /metrics, /healthz, /readyz, and a worker for the node's queues whose HTTP(S) callback
    tasks it delivers. Start several nodes on one storage to scale out."""
    try:
        import uvicorn

        from rdq import logging as rdq_logging
        from rdq.app import App, load_app
        from rdq.server import create_app, load_settings, parse_token_flag, worked_queues
    except ModuleNotFoundError as exc:
        raise click.ClickException(
            "the server needs the 'server' extra: pip install 'rdq-core[server]' (from a "
            f"checkout of rdq: pip install './packages/rdq-core[server]') ({exc})"
        ) from None
    try:
        overrides: dict[str, Any] = {
            "storage": storage_url,
            "host": host,
            "port": port,
            "tokens": [parse_token_flag(t) for t in tokens] or None,
            "queues": list(queues) or None,
            "work": work,
            "max_unrecorded": max_unrecorded,
            "audit_log": audit_log,
            "migrate": migrate,
            "open_metrics": open_metrics,
            "callbacks.allow_hosts": list(allow_hosts) or None,
            "callbacks.allow_networks": list(allow_networks) or None,
            "callbacks.timeout": callback_timeout,
        }
        settings, engine_config = load_settings(config_path, overrides)
        if not settings.storage:
            settings = msgspec.structs.replace(settings, storage=chosen_storage(None))
        engine_app = load_app(app_ref, key="app") if app_ref else App()
        if engine_config:
            engine_app.configure(engine_config)
        rdq_logging.configure(json=log_json)
        json_logs = log_json if log_json is not None else not sys.stderr.isatty()
        if json_logs:
            _stdlib_logs_as_json()
        app = create_app(settings, engine_app=engine_app)
    except RdqError as exc:
        raise click.ClickException(str(exc)) from None
    url = f"http://{settings.host}:{settings.port}"
    works = worked_queues(settings, engine_app) if settings.work else []
    if json_logs:
        structlog.get_logger("rdq.server").info("listening", url=url, ui=f"{url}/ui", works=works)
    else:
        named = ", ".join(works) or "no queue (--no-work)"
        click.echo(f"rdq server on {url} (UI at /ui); works {named}", err=True)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        access_log=False,
        log_level="warning",
        log_config=None if json_logs else uvicorn.config.LOGGING_CONFIG,
        timeout_graceful_shutdown=35,
    )


def _stdlib_logs_as_json() -> None:
    """Render records of stdlib loggers (uvicorn, httpx, asyncio) as JSON lines too, so that
    ``--log-json`` output stays one JSON object per line."""
    import logging

    formatter = structlog.stdlib.ProcessorFormatter(
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.JSONRenderer(),
        ],
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
        ],
    )
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
