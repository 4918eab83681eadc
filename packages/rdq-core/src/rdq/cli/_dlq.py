"""``rdq stats`` and ``rdq dlq list|show|groups|redrive|purge``: the operator's DLQ commands.

Each works either directly on a store (``--storage URL``) or through a server node
(``--server URL --token T``, env ``RDQ_SERVER_URL``/``RDQ_TOKEN``). Redrives and purges are
audited either way: through a node, in the node's name of the token's owner; directly, as
``--actor`` (default ``user@host``), in the store's audit trail (``rdq audit``), on the
``rdq.audit`` logger and in ``--audit-log``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from rdq.cli._common import echo_json, json_option, run_async
from rdq.cli._options import (
    action_options,
    actor_options,
    check_selection,
    filter_options,
    open_target,
    target_options,
)
from rdq.cli._render import confirm_and_act, print_groups, print_queues, print_tasks
from rdq.cli._targets import Action, Listing, Verb
from rdq.cli._tasks import show as show_task
from rdq.spi import DLQFilter, Selector

# --- rdq stats -------------------------------------------------------------------------------


@click.command()
@click.argument("queues", nargs=-1)
@target_options
@json_option
@run_async
async def stats(
    queues: tuple[str, ...],
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Show statistics of QUEUES, or of every queue that holds a task when none is named."""
    async with open_target(storage_url, server_url, token) as target:
        rows = await target.stats(list(queues))
    if as_json:
        echo_json({"queues": rows})
    else:
        print_queues(rows)


# --- rdq dlq ---------------------------------------------------------------------------------


@click.group()
def dlq() -> None:
    """List, inspect, group, redrive and purge dead-lettered tasks."""


def dlq_filter(
    error_type: str | None,
    handler_ref: str | None,
    after: datetime | None,
    before: datetime | None,
) -> DLQFilter | None:
    if not any(v is not None for v in (error_type, handler_ref, after, before)):
        return None
    return DLQFilter(
        error_type=error_type,
        handler_ref=handler_ref,
        dead_lettered_after=after,
        dead_lettered_before=before,
    )


@dlq.command("list")
@click.argument("queue")
@filter_options("Dead-lettered")
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Tasks per page."
)
@click.option("--cursor", help="Continue from this cursor (printed after each page).")
@click.option("--all", "all_pages", is_flag=True, help="Follow cursors to the end of the DLQ.")
@click.option("--attempts", is_flag=True, help="Include attempt records in --json output.")
@target_options
@json_option
@run_async
async def list_command(
    queue: str,
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
    """List dead-lettered tasks of QUEUE, oldest first."""
    selected = dlq_filter(error_type, handler_ref, after, before)
    tasks: list[dict[str, Any]] = []
    async with open_target(storage_url, server_url, token) as target:
        while True:
            listing = Listing(queue, selected, limit, cursor, attempts or not as_json)
            page, cursor = await target.page(listing)
            tasks.extend(page)
            if not all_pages or cursor is None:
                break
    if as_json:
        if not attempts:  # absent, not a misleading []
            for task in tasks:
                task.pop("attempts", None)
        echo_json({"tasks": tasks, "next_cursor": cursor})
    else:
        print_tasks(f"DLQ of {queue}", "DEAD", tasks, cursor)


# `rdq dlq show` is `rdq tasks show`: one task in any status, the same command under both names
dlq.add_command(show_task, name="show")


@dlq.command()
@click.argument("queue")
@target_options
@json_option
@run_async
async def groups(
    queue: str,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Count the DLQ of QUEUE by error type and handler, largest group first."""
    async with open_target(storage_url, server_url, token) as target:
        found = await target.groups(queue)
    if as_json:
        echo_json({"queue": queue, "groups": found})
    else:
        print_groups(queue, found)


def _action_command(verb: Verb) -> click.Command:
    what = "Return" if verb == "redrive" else "Delete"

    @click.command(verb)
    @click.argument("queue")
    @click.argument("ids", nargs=-1)
    @filter_options("Dead-lettered")
    @action_options("Select the whole DLQ of QUEUE (when no ids or filter are given).")
    @actor_options
    @target_options
    @json_option
    @run_async
    async def command(
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
        actor: str | None,
        audit_log: str | None,
        storage_url: str | None,
        server_url: str | None,
        token: str | None,
        as_json: bool,
    ) -> None:
        selected = dlq_filter(error_type, handler_ref, after, before)
        check_selection(ids, selected is not None, everything, "--error-type")
        selector = Selector(ids=list(ids)) if ids else Selector(filter=selected or DLQFilter())
        action = Action(verb, queue, selector, dry_run=dry_run, reason=reason)
        target = open_target(storage_url, server_url, token, actor=actor, audit_log=audit_log)
        async with target:
            await confirm_and_act(target, action, yes, as_json)

    command.help = (
        f"{what} dead-lettered tasks of QUEUE: by IDS, by filter (a group: --error-type and "
        "--handler-ref), or --all. Asks for confirmation (--yes to skip); --dry-run only "
        "counts."
    )
    return command


dlq.add_command(_action_command("redrive"))
dlq.add_command(_action_command("purge"))
