"""``rdq worker APP``: run a worker for an application's queues until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from rdq.app import App, load_app
from rdq.cli._common import storage_option
from rdq.cli._default import chosen_storage
from rdq.errors import RdqError, StorageUnavailable
from rdq.logging import configure, get_logger
from rdq.plugins import open_storage
from rdq.spi import Doubling
from rdq.worker import DEFAULT_MAX_UNRECORDED, MAX_UNRECORDED, Worker, run_on_event_loop

__all__ = ["load_app", "worker"]


@click.command()
@click.argument("app_spec", metavar="APP")
@storage_option
@click.option("--queue", "queues", multiple=True, help="Work only this queue (repeatable).")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="RDQ_CONFIG",
    help="TOML file of queue configs (env RDQ_CONFIG).",
)
@click.option(
    "--grace-period",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds for in-flight work.",
)
@click.option(
    "--max-unrecorded",
    type=click.IntRange(0, MAX_UNRECORDED),
    default=None,
    help="Successes awaiting their batched write that may free their slot "
    f"(default: {DEFAULT_MAX_UNRECORDED}, or the worker's total concurrency if larger; a "
    "crash can leave this many plus the concurrency run but unrecorded, to run again).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve Prometheus /metrics here.",
)
@click.option("--metrics-host", default="127.0.0.1", show_default=True)
@click.option("--worker-id", default=None, help="Default: host:pid:random.")
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default="auto",
    show_default=True,
    help="auto: console on a terminal, JSON otherwise.",
)
@click.option("--log-level", default="INFO", show_default=True)
def worker(
    app_spec: str,
    storage_url: str | None,
    queues: tuple[str, ...],
    config_path: Path | None,
    grace_period: float,
    max_unrecorded: int | None,
    metrics_port: int | None,
    metrics_host: str,
    worker_id: str | None,
    log_format: str,
    log_level: str,
) -> None:
    """Run a worker for APP (pkg.module:app, an rdq.App) until SIGTERM or SIGINT.

    On a signal the worker stops claiming, lets in-flight tasks finish within the grace period,
    then records them as INTERRUPTED (due again at once). A second signal skips the grace.
    """
    try:
        configure(json=None if log_format == "auto" else log_format == "json", level=log_level)
        app = load_app(app_spec)
        storage_url = chosen_storage(storage_url)
        if config_path is not None:
            app.load_config(config_path)
        if metrics_port is not None:
            from rdq.metrics import start_http_server

            start_http_server(metrics_port, metrics_host)
        run_on_event_loop(
            _serve(
                app,
                storage_url,
                list(queues) or None,
                grace_period,
                worker_id,
                max_unrecorded=max_unrecorded,
            )
        )
    except (RdqError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        sys.exit(130)


async def _serve(
    app: App,
    storage_url: str,
    queues: list[str] | None,
    grace_period: float,
    worker_id: str | None,
    *,
    max_unrecorded: int | None = None,
) -> None:
    log = get_logger("rdq.worker")
    storage = open_storage(storage_url)
    backoff = Doubling(0.5, 10.0)
    while True:  # the backend may be starting up: wait for it instead of dying
        try:
            await storage.connect()
            break
        except StorageUnavailable as exc:
            pause = backoff.next()
            log.warning("storage unavailable; retrying", error=str(exc), retry_in=round(pause, 2))
            await asyncio.sleep(pause)
    try:
        w = Worker(
            app,
            storage,
            queues=queues,
            worker_id=worker_id,
            grace_period=grace_period,
            max_unrecorded=max_unrecorded,
        )
        w.install_signal_handlers()
        await w.run()
    finally:
        await storage.aclose()
