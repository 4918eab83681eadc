"""``rdq tasks list|show|cancel|retry-now``: every task of a queue, in any status."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from rdq.admin import TaskSelector
from rdq.cli._common import echo_json, json_option, run_async
from rdq.cli._options import (
    action_options,
    actor_options,
    check_selection,
    filter_options,
    open_target,
    target_options,
)
from rdq.cli._render import confirm_and_act, print_task, print_tasks
from rdq.cli._status import print_outlook
from rdq.cli._targets import Action, Listing, status_of
from rdq.spi import Status, TaskFilter

_STATUSES = [s.value for s in Status]


@click.group()
def tasks() -> None:
    """Find tasks in any status, inspect them, cancel pending or running ones, retry waiting
    ones now."""


def task_filter(
    status: str,
    error_type: str | None,
    handler_ref: str | None,
    after: datetime | None,
    before: datetime | None,
) -> TaskFilter:
    return TaskFilter(
        status=status_of(status),
        error_type=error_type,
        handler_ref=handler_ref,
        after=after,
        before=before,
    )


@tasks.command("list")
@click.argument("queue")
@click.option(
    "--status",
    type=click.Choice(_STATUSES, case_sensitive=False),
    default="PENDING",
    show_default=True,
    help="Which tasks to list.",
)
@filter_options("Status time (due at, lease expiry, completed, dead-lettered, cancelled)")
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Tasks per page."
)
@click.option("--cursor", help="Continue from this cursor (printed after each page).")
@click.option("--all", "all_pages", is_flag=True, help="Follow cursors to the end.")
@click.option("--attempts", is_flag=True, help="Include attempt records in --json output.")
@target_options
@json_option
@run_async
async def list_command(
    queue: str,
    status: str,
    error_type: str | None,
    handler_ref: str | None,
    after: datetime | None,
    before: datetime | None,
    limit: int,
    cursor: str | None,
    all_pages: bool,
    attempts: bool,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """List the tasks of QUEUE in one status, by status time (oldest first)."""
    selected = task_filter(status, error_type, handler_ref, after, before)
    found: list[dict[str, Any]] = []
    async with open_target(storage_url, server_url, token) as target:
        while True:
            listing = Listing(queue, selected, limit, cursor, True)
            page, cursor = await target.page(listing)
            found.extend(page)
            if not all_pages or cursor is None:
                break
        outlooks = await target.outlooks(found)
    if as_json:
        if not attempts:
            for task in found:
                task.pop("attempts", None)
        echo_json({"tasks": found, "next_cursor": cursor, "outlook": outlooks})
    else:
        title = f"{selected.status.value} tasks of {queue}"
        print_tasks(title, selected.status, found, cursor, outlooks)


@tasks.command()
@click.argument("task_id")
@click.option("--tracebacks", is_flag=True, help="Print every attempt's traceback, not the last.")
@target_options
@json_option
@run_async
async def show(
    task_id: str,
    tracebacks: bool,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Show one task (in any status) with every attempt and the last traceback.
    `rdq tasks show` and `rdq dlq show` are the same command."""
    async with open_target(storage_url, server_url, token) as target:
        task = await target.get(task_id)
        (outlook,) = await target.outlooks([task])
    if as_json:
        echo_json(task)
    else:
        print_task(task, tracebacks)
        print_outlook(outlook)


@tasks.command()
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option(
    "--status",
    type=click.Choice(["PENDING", "IN_FLIGHT"], case_sensitive=False),
    default="PENDING",
    show_default=True,
    help="With a filter: cancel tasks in this status (IN_FLIGHT revokes running ones).",
)
@filter_options("Status time")
@action_options("Every task of QUEUE in --status.")
@actor_options
@target_options
@json_option
@run_async
async def cancel(
    queue: str,
    ids: tuple[str, ...],
    status: str,
    error_type: str | None,
    handler_ref: str | None,
    after: datetime | None,
    before: datetime | None,
    everything: bool,
    dry_run: bool,
    reason: str | None,
    yes: bool,
    force: bool,
    actor: str | None,
    audit_log: str | None,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Cancel tasks of QUEUE by IDS, by filter, or --all: a pending task never runs; a
    running one's claim is revoked and its worker abandons it. Asks for confirmation
    (--yes to skip); --dry-run only counts."""
    filtered = any(v is not None for v in (error_type, handler_ref, after, before))
    check_selection(ids, filtered, everything, "--handler-ref")
    if ids:
        selector = TaskSelector(ids=list(ids))
    else:
        selector = TaskSelector(filter=task_filter(status, error_type, handler_ref, after, before))
    action = Action("cancel", queue, selector, dry_run=dry_run, reason=reason, force=force)
    target = open_target(storage_url, server_url, token, actor=actor, audit_log=audit_log)
    async with target:
        await confirm_and_act(target, action, yes, as_json)


@tasks.command("retry-now")
@click.argument("queue")
@click.argument("ids", nargs=-1)
@filter_options("Due")
@action_options("Every PENDING task of QUEUE.")
@actor_options
@target_options
@json_option
@run_async
async def retry_now(
    queue: str,
    ids: tuple[str, ...],
    error_type: str | None,
    handler_ref: str | None,
    after: datetime | None,
    before: datetime | None,
    everything: bool,
    dry_run: bool,
    reason: str | None,
    yes: bool,
    force: bool,
    actor: str | None,
    audit_log: str | None,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Make PENDING tasks of QUEUE that wait out a backoff due now: by IDS, by filter
    (--handler-ref, --error-type, …), or --all. Asks for confirmation (--yes to skip);
    --dry-run only counts."""
    filtered = any(v is not None for v in (error_type, handler_ref, after, before))
    check_selection(ids, filtered, everything, "--handler-ref")
    if ids:
        selector = TaskSelector(ids=list(ids))
    else:
        selector = TaskSelector(
            filter=task_filter("PENDING", error_type, handler_ref, after, before)
        )
    action = Action("retry_now", queue, selector, dry_run=dry_run, reason=reason, force=force)
    target = open_target(storage_url, server_url, token, actor=actor, audit_log=audit_log)
    async with target:
        await confirm_and_act(target, action, yes, as_json)
