"""``rdq stats`` and ``rdq dlq list|show|groups|redrive|purge|redrives``: the operator's DLQ
commands (``redrive --rate`` redrives at a pace).

Each works either directly on a store (``--storage URL``) or through a server node
(``--server URL --token T``, env ``RDQ_SERVER_URL``/``RDQ_TOKEN``). Redrives and purges are
audited either way: through a node, in the node's name of the token's owner; directly, as
``--actor`` (default ``user@host``), in the store's audit trail (``rdq audit``), on the
``rdq.audit`` logger and in ``--audit-log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from datetime import datetime
from typing import Any

import click

from rdq.cli._common import (
    EXIT_NOTHING,
    Interrupted,
    echo_json,
    exit_code,
    json_option,
    prompt,
    run_async,
    stopped_by,
)
from rdq.cli._dlq_files import export_dlq, import_dlq
from rdq.cli._options import (
    action_options,
    actor_options,
    archive_options,
    check_selection,
    dlq_filter,
    filter_options,
    open_target,
    target_options,
)
from rdq.cli._render import (
    ask,
    confirm_and_act,
    print_groups,
    print_queues,
    print_redrives,
    print_skipped,
    print_tasks,
)
from rdq.cli._status import incident
from rdq.cli._targets import Action, Listing, Target, Verb
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
    """Show statistics of QUEUES, or of every queue that holds a task when none is named,
    each flagged when it is paused, held by a breaker, or served by no live worker, with what
    retention archived and removed (its dead_ttl, archive_succeeded)."""
    async with open_target(storage_url, server_url, token) as target:
        found = await incident(target, list(queues))
        kept = await target.retention([f["queue"] for f in found])
    rows = [{**f["stats"], "flags": f["flags"]} for f in found]
    for row in rows:
        if row["queue"] in kept:
            row["retention"] = kept[row["queue"]]
    if as_json:
        echo_json({"queues": rows})
    else:
        print_queues(rows)


# --- rdq dlq ---------------------------------------------------------------------------------


@click.group()
def dlq() -> None:
    """List, inspect, group, redrive, purge, export and import dead-lettered tasks."""


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
@click.argument("queue", required=False)
@target_options
@json_option
@run_async
async def groups(
    queue: str | None,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Count the DLQ of QUEUE (of every queue) by error type and handler, largest group
    first."""
    async with open_target(storage_url, server_url, token) as target:
        if queue is not None:
            found = await target.groups(queue)
        else:
            found = []
            for row in await target.stats([]):
                if row["dlq_depth"]:
                    found += [
                        {"queue": row["queue"], **g} for g in await target.groups(row["queue"])
                    ]
            found.sort(key=lambda g: (-g["count"], g["queue"]))
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
    @archive_options
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
        force: bool,
        archive: str | None,
        no_archive: bool,
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
        action = Action(verb, queue, selector, dry_run=dry_run, reason=reason, force=force)
        target = open_target(
            storage_url,
            server_url,
            token,
            actor=actor,
            audit_log=audit_log,
            archive=archive,
            no_archive=no_archive,
        )
        async with target:
            await confirm_and_act(target, action, yes, as_json)

    command.help = (
        f"{what} dead-lettered tasks of QUEUE: by IDS, by filter (a group: --error-type and "
        "--handler-ref), or --all. Asks for confirmation (--yes to skip); --dry-run only "
        "counts. Every task is written to the archive before it is deleted (--no-archive: "
        "not); the answer says how many matched, were purged, and were already gone."
    )
    return command


dlq.add_command(_action_command("purge"))


@dlq.command()
@click.argument("queue_name", metavar="[QUEUE]", required=False)
@click.argument("ids", nargs=-1)
@filter_options("Dead-lettered")
@action_options("Select the whole DLQ of QUEUE (when no ids or filter are given).")
@click.option(
    "--rate",
    metavar="RATE",
    help="Redrive at most RATE tasks per second (50/s, 600/min): a paced redrive, driven "
    "here with a progress bar (Ctrl-C cancels it), or by the node with --server.",
)
@click.option(
    "--detach",
    is_flag=True,
    help="With --rate: only start it, and say which running node will drive it.",
)
@click.option("--cancel", "cancel_id", metavar="ID", help="Cancel the paced redrive ID.")
@click.option("--queue", "queue_option", metavar="QUEUE", help="The queue (with --cancel).")
@actor_options
@target_options
@json_option
@run_async
async def redrive(
    queue_name: str | None,
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
    rate: str | None,
    detach: bool,
    cancel_id: str | None,
    queue_option: str | None,
    actor: str | None,
    audit_log: str | None,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Return dead-lettered tasks of QUEUE: by IDS, by filter (a group: --error-type and
    --handler-ref), or --all. Asks for confirmation (--yes to skip); --dry-run only counts.

    With --rate, at most that many per second, as an operation with an id that shows its
    progress (rdq dlq redrives) and survives its driver: any node on the store takes it over.
    --cancel ID --queue QUEUE stops one; the tasks not yet returned stay in the DLQ."""
    if queue_name and queue_option and queue_name != queue_option:
        raise click.UsageError("name the queue once (QUEUE or --queue)")
    queue = queue_name or queue_option
    if not queue:
        raise click.UsageError("name the queue (QUEUE, or --queue with --cancel)")
    target = open_target(storage_url, server_url, token, actor=actor, audit_log=audit_log)
    if cancel_id is not None:
        if ids or rate or everything or any(v is not None for v in (error_type, handler_ref)):
            raise click.UsageError("--cancel ID takes only --queue (and --reason)")
        async with target:
            op = await target.cancel_redrive(queue, cancel_id, reason)
        _said(op, as_json)
        return
    if detach and rate is None:
        raise click.UsageError("--detach goes with --rate")
    selected = dlq_filter(error_type, handler_ref, after, before)
    check_selection(ids, selected is not None, everything, "--error-type")
    selector = Selector(ids=list(ids)) if ids else Selector(filter=selected or DLQFilter())
    if rate is None:
        action = Action("redrive", queue, selector, dry_run=dry_run, reason=reason, force=force)
        async with target:
            await confirm_and_act(target, action, yes, as_json)
        return
    from rdq.admin import parse_rate

    per_second = parse_rate(rate)
    async with target:
        await _paced(
            target, queue, selector, per_second, reason, yes, detach, dry_run, force, as_json
        )


async def _paced(
    target: Target,
    queue: str,
    selector: Selector,
    rate: float,
    reason: str | None,
    yes: bool,
    detach: bool,
    dry_run: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Count, ask, start a paced redrive; then follow it (or, detached, say who will)."""
    action = Action("redrive", queue, selector, dry_run=True, reason=reason, force=force)
    seen = await target.preview(action)
    count = int(seen["count"])
    if seen.get("skipped") and not as_json:
        print_skipped(action, seen["skipped"])
    if dry_run or count == 0:
        if as_json:
            echo_json(
                {
                    "action": "redrive",
                    "queue": queue,
                    "count": count,
                    "dry_run": dry_run,
                    "done": False,
                    "skipped": seen.get("skipped") or [],
                    "hint": seen.get("hint"),
                }
            )
        elif count == 0:
            click.echo("0 tasks match; nothing done" + (" (dry run)" if dry_run else ""))
            if seen.get("hint"):
                click.echo(str(seen["hint"]))
        else:
            click.echo(
                f"redrive would act on {count} task(s) of queue {queue}, at most {rate:g}/s "
                f"(about {_duration(count / rate)}; dry run)"
            )
        if count == 0:
            exit_code(EXIT_NOTHING)
        return
    ask(f"redrive {count} task(s) of queue {queue} at most {rate:g}/s", yes)
    if not yes and reason is None:
        reason = prompt("Reason (kept in the audit trail)").strip() or None
    op = await target.start_paced(queue, selector, rate, reason, detach)
    if detach:
        drivers = await target.drivers(op)
        if as_json:
            echo_json({"operation": op, "drivers": drivers})
            return
        click.echo(f"paced redrive {op['id']} started: {op['total']} task(s) at {rate:g}/s")
        if drivers:
            click.echo(f"driven by {drivers[0]}" + (" (or another live node)" * (len(drivers) > 1)))
        else:
            click.echo(
                "no live node on this store drives paced redrives: it starts when one does "
                "(rdq server), or cancel it: rdq dlq redrive --cancel "
                f"{op['id']} --queue {queue}"
            )
        click.echo(f"follow it: rdq dlq redrives {queue}")
        return
    bar = _OpProgress(op, as_json)
    with bar as progress:
        try:
            ended = await target.follow(op, progress)
        except asyncio.CancelledError:  # Ctrl-C, SIGHUP, SIGTERM: stop it, never orphan it
            signum = stopped_by()
            if signum is None:
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            bar.stop()
            why = f"interrupted ({signal.Signals(signum).name})"
            ended = await target.cancel_redrive(queue, op["id"], why)
            with contextlib.suppress(OSError, ValueError):  # the terminal may be gone
                _said(ended, as_json)
            raise Interrupted(
                signum, f"paced redrive {op['id']} cancelled after {ended['done']} task(s)"
            ) from None
    _said(ended, as_json)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _said(op: dict[str, Any], as_json: bool) -> None:
    """Print how a paced redrive stands."""
    if as_json:
        echo_json({"operation": op})
        return
    where = f"paced redrive {op['id']} of queue {op['queue']}"
    done = f"{op['done']} of {op['total']} task(s) redriven"
    if op["status"] == "done":
        click.echo(f"{where} done: {done}")
    elif op["status"] == "cancelled":
        by = f" by {op['cancelled_by']}" if op.get("cancelled_by") else ""
        click.echo(f"{where} cancelled{by}: {done}; the rest stay in the DLQ")
    elif op["status"] == "running":
        click.echo(f"{where} goes on elsewhere (driven by {op.get('driver') or 'nobody yet'})")
    else:
        click.echo(
            f"{where} {op['status']}: {done}" + (f" ({op['error']})" * bool(op.get("error")))
        )


class _OpProgress:
    """A progress bar for a paced redrive (none with --json)."""

    def __init__(self, op: dict[str, Any], quiet: bool) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.enabled = not quiet
        self._progress = Progress(
            TextColumn(f"redrive {op['id']} at {op['rate']:g}/s"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._task = self._progress.add_task("redrive", total=op["total"], completed=op["done"])

    def __enter__(self) -> Any:
        if not self.enabled:
            return None
        self._progress.start()
        return self._advance

    def _advance(self, op: dict[str, Any]) -> None:
        self._progress.update(self._task, completed=op["done"], total=op["total"])

    def stop(self) -> None:
        if self.enabled:
            with contextlib.suppress(OSError, ValueError):  # a terminal that went away
                self._progress.stop()
            self.enabled = False

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dlq.command()
@click.argument("queue_name", metavar="[QUEUE]", required=False)
@target_options
@json_option
@run_async
async def redrives(
    queue_name: str | None,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """List the paced redrives of QUEUE (of every queue), newest first, with their progress."""
    async with open_target(storage_url, server_url, token) as target:
        rows, unsupported = await target.redrives(queue_name)
    if as_json:
        echo_json({"redrives": rows, "unsupported": unsupported})
    else:
        print_redrives(rows, unsupported)


# `rdq dlq export` and `rdq dlq import`: the DLQ to a file and back (rdq.cli._dlq_files)
dlq.add_command(export_dlq, name="export")
dlq.add_command(import_dlq, name="import")
