"""``rdq stats`` and ``rdq dlq list|show|redrive|purge``: the operator's commands.

Each works either directly on a store (``--storage URL``) or through a server node
(``--server URL --token T``, env ``RDQ_SERVER_URL``/``RDQ_TOKEN``). Redrives and purges are
audited either way: through a node, in the node's name of the token's owner; directly, with
``--actor`` (default ``user@host``) on the ``rdq.audit`` logger and in ``--audit-log``.
"""

from __future__ import annotations

import getpass
import socket
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any

import click
import msgspec
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
from rich.table import Table

from rdq.cli._common import echo_json, json_option, run_async
from rdq.cli._default import DEFAULT_STORAGE, STORAGE_ENV, chosen_storage
from rdq.cli._targets import DirectTarget, HttpTarget, Target

_console = Console()


def _target_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--storage",
            "storage_url",
            envvar=list(STORAGE_ENV),
            metavar="URL",
            help=f"Work on this store directly (env RDQ_STORAGE; default {DEFAULT_STORAGE}).",
        ),
        click.option(
            "--server",
            "server_url",
            envvar="RDQ_SERVER_URL",
            metavar="URL",
            help="Work through this rdq server node (env RDQ_SERVER_URL).",
        ),
        click.option(
            "--token",
            envvar="RDQ_TOKEN",
            metavar="TOKEN",
            help="Bearer token for --server (env RDQ_TOKEN).",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _open_target(
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    *,
    actor: str | None = None,
    audit_log: str | None = None,
) -> Target:
    if storage_url and server_url:
        raise click.UsageError("give --storage or --server, not both")
    if server_url:
        if not token:
            raise click.UsageError("--server needs --token (or RDQ_TOKEN)")
        return HttpTarget(server_url, token)
    _log_to_stderr()
    return DirectTarget(
        chosen_storage(storage_url), actor=actor or _default_actor(), audit_log=audit_log
    )


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time (it may be swapped, as in tests)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


def _log_to_stderr() -> None:
    """Audit and storage log lines go to stderr, so ``--json`` output stays parseable."""
    from rdq import logging as rdq_logging

    rdq_logging.configure(stream=_CurrentStderr())


def _default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


# --- rdq stats -------------------------------------------------------------------------------


@click.command()
@click.argument("queues", nargs=-1)
@_target_options
@json_option
@run_async
async def stats(
    queues: tuple[str, ...],
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Show statistics of QUEUES (through --server: every queue the node knows by default)."""
    async with _open_target(storage_url, server_url, token) as target:
        rows = await target.stats(list(queues))
    if as_json:
        echo_json({"queues": rows})
        return
    table = Table(title="queues")
    for column in ("queue", "pending", "in flight", "DLQ", "succeeded", "oldest due"):
        table.add_column(column, justify="left" if column == "queue" else "right")
    for row in rows:
        table.add_row(
            row["queue"],
            str(row["pending"]),
            str(row["in_flight"]),
            str(row["dlq_depth"]),
            str(row["succeeded"]),
            _age(row["oldest_pending_age"]),
        )
    _console.print(table)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


# --- rdq dlq ---------------------------------------------------------------------------------


@click.group()
def dlq() -> None:
    """List, inspect, redrive and purge dead-lettered tasks."""


def _filter_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--error-type", help="Only tasks whose last error has this type."),
        click.option("--handler-ref", help="Only tasks with this handler_ref."),
        click.option(
            "--after",
            "dead_after",
            type=_AWARE,
            metavar="TIME",
            help="Dead-lettered at or after TIME (RFC 3339 with offset).",
        ),
        click.option(
            "--before",
            "dead_before",
            type=_AWARE,
            metavar="TIME",
            help="Dead-lettered before TIME (RFC 3339 with offset).",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


class _AwareDateTime(click.ParamType[datetime]):
    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            self.fail(f"{value!r} is not an RFC 3339 time", param, ctx)
        if parsed.tzinfo is None:
            self.fail(f"{value!r} has no UTC offset (add Z or +HH:MM)", param, ctx)
        return parsed


_AWARE = _AwareDateTime()


def _filter_body(
    error_type: str | None,
    handler_ref: str | None,
    dead_after: datetime | None,
    dead_before: datetime | None,
) -> dict[str, Any] | None:
    body = {
        "error_type": error_type,
        "handler_ref": handler_ref,
        "dead_lettered_after": dead_after.isoformat() if dead_after else None,
        "dead_lettered_before": dead_before.isoformat() if dead_before else None,
    }
    body = {k: v for k, v in body.items() if v is not None}
    return body or None


@dlq.command("list")
@click.argument("queue")
@_filter_options
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Tasks per page."
)
@click.option("--cursor", help="Continue from this cursor (printed after each page).")
@click.option("--all", "all_pages", is_flag=True, help="Follow cursors to the end of the DLQ.")
@click.option("--attempts", is_flag=True, help="Include attempt records (with --json).")
@_target_options
@json_option
@run_async
async def list_command(
    queue: str,
    error_type: str | None,
    handler_ref: str | None,
    dead_after: datetime | None,
    dead_before: datetime | None,
    limit: int,
    cursor: str | None,
    all_pages: bool,
    attempts: bool,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """List dead-lettered tasks of QUEUE, oldest first."""
    dlq_filter = _filter_body(error_type, handler_ref, dead_after, dead_before)
    tasks: list[dict[str, Any]] = []
    async with _open_target(storage_url, server_url, token) as target:
        while True:
            page, cursor = await target.list_dlq(
                queue, dlq_filter, limit, cursor, include_attempts=attempts or not as_json
            )
            tasks.extend(page)
            if not all_pages or cursor is None:
                break
    if as_json:
        echo_json({"tasks": tasks, "next_cursor": cursor})
        return
    table = Table(title=f"DLQ of {queue}")
    for column in ("id", "handler_ref", "dead-lettered at", "attempts", "redrives", "last error"):
        table.add_column(column, overflow="fold")
    for task in tasks:
        last = task["attempts"][-1] if task.get("attempts") else {}
        error = f"{last.get('error_type') or ''}: {last.get('error_message') or ''}".strip(": ")
        table.add_row(
            task["id"],
            task["handler_ref"],
            str(task.get("dead_lettered_at") or "-"),
            str(task["attempt_count"]),
            str(task["redrive_count"]),
            error[:120],
        )
    _console.print(table)
    if cursor:
        _console.print(f"more: --cursor {cursor}")


@dlq.command()
@click.argument("task_id")
@_target_options
@json_option
@run_async
async def show(
    task_id: str,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Show one task with every attempt."""
    async with _open_target(storage_url, server_url, token) as target:
        task = await target.get(task_id)
    if as_json:
        echo_json(task)
        return
    fields = Table(show_header=False, title=f"task {task['id']}")
    fields.add_column("field", style="bold")
    fields.add_column("value", overflow="fold")
    for key, value in task.items():
        if key != "attempts":
            text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
            fields.add_row(key, text)
    _console.print(fields)
    attempts = Table(title="attempts")
    for column in ("#", "outcome", "error", "started", "finished", "worker"):
        attempts.add_column(column, overflow="fold")
    for a in task.get("attempts", []):
        error = f"{a.get('error_type') or ''}: {a.get('error_message') or ''}".strip(": ")
        attempts.add_row(
            str(a["number"]),
            a["outcome"],
            error,
            str(a.get("started_at") or "-"),
            str(a.get("finished_at") or "-"),
            str(a.get("worker_id") or "-"),
        )
    _console.print(attempts)


def _action_command(action: str) -> click.Command:
    verb = "Return" if action == "redrive" else "Delete"

    @click.command(action)
    @click.argument("queue")
    @click.argument("ids", nargs=-1)
    @_filter_options
    @click.option(
        "--all",
        "everything",
        is_flag=True,
        help="Select the whole DLQ of QUEUE (when no ids or filter are given).",
    )
    @click.option("--dry-run", is_flag=True, help="Only count the selected tasks.")
    @click.option("--reason", help="Why (kept in the audit record).")
    @click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
    @click.option(
        "--actor",
        envvar="RDQ_ACTOR",
        help="Who you are, for the audit record with --storage (default user@host).",
    )
    @click.option(
        "--audit-log",
        envvar="RDQ_AUDIT_LOG",
        metavar="FILE",
        help="With --storage: also append the audit record to this JSON-lines file.",
    )
    @_target_options
    @json_option
    @run_async
    async def command(
        queue: str,
        ids: tuple[str, ...],
        error_type: str | None,
        handler_ref: str | None,
        dead_after: datetime | None,
        dead_before: datetime | None,
        everything: bool,
        dry_run: bool,
        reason: str | None,
        yes: bool,
        actor: str | None,
        audit_log: str | None,
        storage_url: str | None,
        server_url: str | None,
        token: str | None,
        as_json: bool,
    ) -> None:
        dlq_filter = _filter_body(error_type, handler_ref, dead_after, dead_before)
        if ids and (dlq_filter or everything):
            raise click.UsageError("give task ids or a filter (or --all), not both")
        if not ids and not dlq_filter and not everything:
            raise click.UsageError("give task ids, a filter (--error-type, …), or --all")
        selector: dict[str, Any] = {"ids": list(ids)} if ids else {"filter": dlq_filter or {}}
        target = _open_target(storage_url, server_url, token, actor=actor, audit_log=audit_log)
        async with target:
            count = await target.act(action, queue, selector, dry_run=True, reason=reason)
            if dry_run or count == 0:
                _report(action, queue, count, True, as_json)
                return
            if not yes:
                if not sys.stdin.isatty():
                    raise click.UsageError(
                        f"{action} of {count} tasks needs --yes when not interactive"
                    )
                click.confirm(f"{action} {count} task(s) of queue {queue}?", abort=True)
            with _ProgressBar(count, as_json) as advance:
                done = await target.act(
                    action, queue, selector, dry_run=False, reason=reason, progress=advance
                )
        _report(action, queue, done, False, as_json)

    command.help = (
        f"{verb} dead-lettered tasks of QUEUE: by IDS, by filter, or --all. "
        "Asks for confirmation (--yes to skip); --dry-run only counts."
    )
    return command


def _report(action: str, queue: str, count: int, dry_run: bool, as_json: bool) -> None:
    if as_json:
        echo_json({"action": action, "queue": queue, "count": count, "dry_run": dry_run})
    elif dry_run:
        click.echo(f"{action} would act on {count} task(s) of queue {queue} (dry run)")
    else:
        done = "redriven" if action == "redrive" else "purged"
        click.echo(f"{count} task(s) of queue {queue} {done}")


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


dlq.add_command(_action_command("redrive"))
dlq.add_command(_action_command("purge"))
