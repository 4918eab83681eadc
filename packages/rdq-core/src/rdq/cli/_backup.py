"""``rdq backup --to PATH``: a checked copy of a store, taken while its workers keep running.

The store writes the copy itself (the ``backup`` capability; rdq-sqlite has it): one
consistent snapshot holding every task acknowledged before the backup began, written beside
the target as ``<PATH>.partial``, checked, and only then put at ``PATH``. While it is written
a line on standard error every two seconds says how far it got; at the end the copy's tasks
per status and the checks it passed are printed (or one JSON document with ``--json``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from rdq.cli._common import echo_json, json_option, run_async, storage_option
from rdq.cli._copy import shown
from rdq.cli._default import chosen_storage
from rdq.plugins import open_storage
from rdq.spi import Backup, Status, Storage, require

__all__ = ["backup"]

_EVERY = 2.0
_STATUSES = [str(status) for status in Status]


@click.command()
@storage_option
@click.option(
    "--to",
    "target",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The file to write the copy to.",
)
@click.option("--force", is_flag=True, help="Replace the file if it exists.")
@json_option
@run_async
async def backup(storage_url: str | None, target: Path, force: bool, as_json: bool) -> None:
    """Write a checked copy of the store to a file while workers keep running (SQLite).

    The copy holds every task acknowledged before the backup began; a file at --to is
    refused unless --force is given, and is replaced only by a copy that passed its checks."""
    url = chosen_storage(storage_url, existing=True)
    async with open_storage(url) as store:
        require(store, "backup", "rdq backup")
        before = await _task_count(store)
        click.echo(
            f"backing up {shown(url)} ({before:,} tasks) to {target}",
            err=True,
        )
        watch = asyncio.create_task(_progress(target))
        try:
            result = await store.backup(str(target), overwrite=force)
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
    _report(result, as_json)


async def _task_count(store: Storage) -> int:
    """The tasks the store holds now, by its own counts (an estimate where it estimates)."""
    queues = await store.list_queues()
    fields = ("pending", "in_flight", "succeeded", "dlq_depth", "cancelled")
    return sum(getattr(stats, name) for stats in queues for name in fields)


async def _progress(target: Path) -> None:
    """Every two seconds, on standard error: how much of the copy is written so far."""
    partial = target.with_name(target.name + ".partial")
    began = time.monotonic()
    while True:
        await asyncio.sleep(_EVERY)
        try:
            size = await asyncio.to_thread(os.path.getsize, partial)
        except OSError:
            size = 0
        click.echo(
            f"  {time.monotonic() - began:.0f} s: {_size(size)} written",
            err=True,
        )


def _size(size: int) -> str:
    return f"{size / 1024 / 1024:,.1f} MiB" if size >= 1024 * 1024 else f"{size:,} bytes"


def _report(result: Backup, as_json: bool) -> None:
    total = sum(result.tasks.values())
    if as_json:
        echo_json(
            {
                "target": result.target,
                "size": result.size,
                "tasks": total,
                "by_status": result.tasks,
                "checks": result.checks,
                "seconds": round(result.seconds, 3),
            }
        )
        return
    table = Table(title="tasks in the copy")
    table.add_column("status")
    table.add_column("tasks", justify="right")
    for status in sorted(result.tasks, key=_order):
        table.add_row(status, f"{result.tasks[status]:,}")
    table.add_row("total", f"{total:,}")
    Console(file=sys.stdout).print(table)
    click.echo(
        f"backed up {total:,} task(s) to {result.target} ({_size(result.size)}) "
        f"in {result.seconds:.1f} s; checked: {', '.join(result.checks)}"
    )


def _order(status: str) -> int:
    return _STATUSES.index(status) if status in _STATUSES else len(_STATUSES)
