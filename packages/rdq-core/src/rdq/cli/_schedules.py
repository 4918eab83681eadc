"""``rdq schedules APP``: an application's periodic schedules and when each ticks next."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from rdq.app import App, load_app
from rdq.cli._common import echo_json, json_option, run_async
from rdq.cli._default import STORAGE_ENV, chosen_storage
from rdq.errors import NotFound
from rdq.plugins import open_storage
from rdq.schedules import Schedule

__all__ = ["schedules"]


@click.command()
@click.argument("app_spec", metavar="APP")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="RDQ_CONFIG",
    help="TOML file with [schedules.NAME] (and queue) tables (env RDQ_CONFIG).",
)
@click.option(
    "--storage",
    "storage_url",
    envvar=list(STORAGE_ENV),
    default=None,
    metavar="URL",
    help="Read the time from this store (its clock decides ticks) and show how each "
    "schedule's last tick went. Without it, the local clock is used.",
)
@json_option
@run_async
async def schedules(
    app_spec: str, config_path: Path | None, storage_url: str | None, as_json: bool
) -> None:
    """List the schedules of APP (pkg.module:app) with their next tick."""
    app = load_app(app_spec)
    if config_path is not None:
        app.load_config(config_path)
    rows: list[dict[str, Any]]
    if storage_url:
        async with open_storage(chosen_storage(storage_url, existing=True)) as storage:
            now = await storage.now()
            rows = [await _row(app, s, now, storage) for s in app.schedules.values()]
        clock = "storage"
    else:
        now = datetime.now(UTC)
        rows = [await _row(app, s, now, None) for s in app.schedules.values()]
        clock = "local"
    if as_json:
        public = [{k: v for k, v in row.items() if k != "_display"} for row in rows]
        echo_json({"now": now.isoformat(), "clock": clock, "schedules": public})
        return
    _print(rows, now, clock)


async def _row(app: App, schedule: Schedule, now: datetime, storage: Any) -> dict[str, Any]:
    """What is shown of one schedule (``_display`` holds the table's texts, not printed as
    JSON)."""
    following = schedule.next_tick(now)
    last = schedule.last_tick(now)
    row: dict[str, Any] = {
        "name": schedule.name,
        "handler": schedule.handler,
        "queue": app.schedule_queue(schedule),
        "rule": schedule.spec,
        "catch_up": schedule.catch_up,
        "next_tick": following.isoformat() if following else None,
        "next_tick_local": following.astimezone(schedule.zone).isoformat() if following else None,
        "last_tick": last.isoformat() if last else None,
    }
    display = {
        "next": _when(following, schedule) if following else "-",
        "last": _when(last, schedule) if last else "-",
    }
    if storage is not None and last is not None:
        task_id = schedule.task_id(last)
        try:
            status: str | None = (await storage.get(task_id)).status.value
        except NotFound:
            status = None
        row["last_task"] = {"id": task_id, "status": status}
    return row | {"_display": display}


def _print(rows: list[dict[str, Any]], now: datetime, clock: str) -> None:
    console = Console(highlight=False)
    if not rows:
        console.print("no schedules")
        return
    table = Table(title=f"schedules ({clock} clock: {now:%Y-%m-%d %H:%M:%S} UTC)")
    for column in ("schedule", "handler", "queue", "ticks", "catch-up", "next tick"):
        table.add_column(column, overflow="fold")
    with_last = any("last_task" in row for row in rows)
    if with_last:
        table.add_column("last tick", overflow="fold")
    for row in rows:
        cells = [
            row["name"],
            row["handler"],
            row["queue"],
            row["rule"],
            row["catch_up"],
            row["_display"]["next"],
        ]
        if with_last:
            last = row.get("last_task")
            status = (last["status"] or "not enqueued") if last else ""
            cells.append(f"{row['_display']['last']} {status}".strip())
        table.add_row(*cells)
    console.print(table)


def _when(at: datetime, schedule: Schedule) -> str:
    """``at`` in the schedule's zone, minutes precision unless it has seconds."""
    local = at.astimezone(schedule.zone)
    return local.strftime("%Y-%m-%d %H:%M" + (":%S" if local.second else "") + " %Z")
