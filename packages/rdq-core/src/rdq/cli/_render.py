"""Tables the operator commands print, and the confirm-then-act flow they share."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import click
import msgspec
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
from rich.table import Table

from rdq.cli._common import echo_json
from rdq.cli._targets import Action, Target

__all__ = [
    "age",
    "confirm_and_act",
    "print_audit",
    "print_groups",
    "print_queues",
    "print_task",
    "print_tasks",
]

console = Console()
_DONE = {"redrive": "redriven", "purge": "purged", "cancel": "cancelled"}


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _count(row: dict[str, Any], name: str) -> str:
    value = row.get(name, 0)
    return f"~{value}" if name in (row.get("estimated") or ()) else str(value)


def print_queues(rows: list[dict[str, Any]]) -> None:
    table = Table(title="queues")
    columns = ("queue", "pending", "in flight", "DLQ", "succeeded", "cancelled", "oldest due")
    for column in columns:
        table.add_column(column, justify="left" if column == "queue" else "right")
    for row in rows:
        table.add_row(
            row["queue"],
            _count(row, "pending"),
            _count(row, "in_flight"),
            _count(row, "dlq_depth"),
            _count(row, "succeeded"),
            _count(row, "cancelled"),
            age(row["oldest_pending_age"]),
        )
    console.print(table)
    if any(row.get("estimated") for row in rows):
        console.print("~ marks an estimate (large counts are estimated by the store)")
    if not rows:
        console.print("no queue holds a task yet")


def last_error(task: dict[str, Any]) -> str:
    last = task["attempts"][-1] if task.get("attempts") else {}
    return f"{last.get('error_type') or ''}: {last.get('error_message') or ''}".strip(": ")


_TIME_OF = {
    "PENDING": ("due at", "next_attempt_at"),
    "IN_FLIGHT": ("lease expires", "lease_expires_at"),
    "SUCCEEDED": ("completed at", "completed_at"),
    "DEAD": ("dead-lettered at", "dead_lettered_at"),
    "CANCELLED": ("cancelled at", "cancelled_at"),
}


def print_tasks(title: str, status: str, tasks: list[dict[str, Any]], cursor: str | None) -> None:
    label, field = _TIME_OF[status]
    table = Table(title=title)
    columns = ["id", "handler_ref", label, "attempts", "redrives", "last error"]
    if status == "IN_FLIGHT":
        columns.insert(3, "worker")
    for column in columns:
        table.add_column(column, overflow="fold")
    for task in tasks:
        row = [
            task["id"],
            task["handler_ref"],
            str(task.get(field) or "-"),
            str(task["attempt_count"]),
            str(task["redrive_count"]),
            last_error(task)[:120],
        ]
        if status == "IN_FLIGHT":
            row.insert(3, str(task.get("claimed_by") or "-"))
        table.add_row(*row)
    console.print(table)
    if cursor:
        console.print(f"more: --cursor {cursor}")


def print_task(task: dict[str, Any], all_tracebacks: bool) -> None:
    fields = Table(show_header=False, title=f"task {task['id']}")
    fields.add_column("field", style="bold")
    fields.add_column("value", overflow="fold")
    for key, value in task.items():
        if key != "attempts" and value not in (None, {}, []):
            text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
            fields.add_row(key, text)
    console.print(fields)
    attempts = Table(title="attempts")
    for column in ("#", "outcome", "error", "started", "finished", "worker"):
        attempts.add_column(column, overflow="fold")
    history = task.get("attempts", [])
    for a in history:
        error = f"{a.get('error_type') or ''}: {a.get('error_message') or ''}".strip(": ")
        attempts.add_row(
            str(a["number"]),
            a["outcome"],
            error,
            str(a.get("started_at") or "-"),
            str(a.get("finished_at") or "-"),
            str(a.get("worker_id") or "-"),
        )
    console.print(attempts)
    with_tracebacks = [a for a in history if a.get("traceback")]
    shown = with_tracebacks if all_tracebacks else with_tracebacks[-1:]
    for a in shown:
        console.rule(f"traceback of attempt {a['number']} ({a['outcome']})")
        console.print(a["traceback"], markup=False, highlight=False)
    hidden = len(with_tracebacks) - len(shown)
    if hidden:
        console.print(f"({hidden} earlier traceback(s): --tracebacks shows them all)")


def print_groups(queue: str, groups: list[dict[str, Any]]) -> None:
    table = Table(title=f"DLQ of {queue} by error")
    for column in ("count", "error type", "handler_ref", "first", "last"):
        table.add_column(column, overflow="fold", justify="right" if column == "count" else "left")
    for g in groups:
        table.add_row(
            str(g["count"]),
            g.get("error_type") or "-",
            g["handler_ref"],
            str(g["first_dead_lettered_at"]),
            str(g["last_dead_lettered_at"]),
        )
    console.print(table)
    if groups:
        console.print(
            "act on a group: rdq dlq redrive|purge "
            f"{queue} --error-type TYPE --handler-ref REF --reason …"
        )


def print_audit(entries: list[dict[str, Any]], cursor: str | None) -> None:
    table = Table(title="audit trail (newest first)")
    for column in ("time", "actor", "action", "queue", "count", "selection", "reason"):
        table.add_column(column, overflow="fold")
    for e in entries:
        selection = msgspec.json.encode(e.get("selector") or {}).decode()
        count = str(e["count"]) + (" (failed)" if e.get("error") else "")
        table.add_row(
            str(e.get("time") or "-"),
            e["actor"],
            e["action"],
            e["queue"],
            count,
            selection[:200],
            e.get("reason") or "",
        )
    console.print(table)
    if cursor:
        console.print(f"older: --cursor {cursor}")


async def confirm_and_act(target: Target, action: Action, yes: bool, as_json: bool) -> None:
    """Count the selection (a dry run), ask (unless ``yes``), act with a progress bar, report."""
    dry = Action(action.verb, action.queue, action.selector, dry_run=True, reason=action.reason)
    count = await target.act(dry)
    if action.dry_run or count == 0:
        _report(action, count, True, as_json)
        return
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(
                f"{action.verb} of {count} tasks needs --yes when not interactive"
            )
        click.confirm(f"{action.verb} {count} task(s) of queue {action.queue}?", abort=True)
        if action.reason is None:
            asked = "Reason (kept in the audit trail)"
            reason = click.prompt(asked, default="", show_default=False)
            action = dataclasses.replace(action, reason=reason.strip() or None)
    with _ProgressBar(count, as_json) as advance:
        done = await target.act(action, advance)
    _report(action, done, False, as_json)


def _report(action: Action, count: int, dry_run: bool, as_json: bool) -> None:
    if as_json:
        echo_json(
            {"action": action.verb, "queue": action.queue, "count": count, "dry_run": dry_run}
        )
    elif dry_run:
        click.echo(f"{action.verb} would act on {count} task(s) of queue {action.queue} (dry run)")
    else:
        click.echo(f"{count} task(s) of queue {action.queue} {_DONE[action.verb]}")


class _ProgressBar:
    """A progress bar for large selections (none for small ones or with --json)."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.enabled = total >= 1000 and not quiet
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._task = self._progress.add_task("working", total=total)

    def __enter__(self) -> Callable[[int, int | None], None] | None:
        if not self.enabled:
            return None
        self._progress.start()
        return self._advance

    def _advance(self, done: int, total: int | None) -> None:
        self._progress.update(self._task, completed=done, total=total)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._progress.stop()
