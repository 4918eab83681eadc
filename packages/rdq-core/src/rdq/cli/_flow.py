"""``rdq queue pause|resume|status``, ``rdq breakers``, ``rdq breaker open|close``, ``rdq limits``,
``rdq workers``:
flow control and the fleet, on a store directly (``--storage``) or through a node
(``--server``). Pauses and breakers set by hand are audited as ``rdq dlq redrive`` is."""

from __future__ import annotations

from typing import Literal

import click

from rdq.cli._common import echo_json, json_option, run_async
from rdq.cli._options import actor_options, force_option, open_target, target_options
from rdq.cli._render import (
    ask,
    console,
    held_text,
    print_breakers,
    print_limits,
    print_workers,
)
from rdq.cli._status import queue_status

__all__ = ["breaker", "breakers", "limits", "queue", "workers"]


@click.group()
def queue() -> None:
    """Pause and resume a queue, one of its handlers, or a dependency; show what holds a
    queue (status)."""


def _pause_command(paused: bool) -> click.Command:
    verb = "pause" if paused else "resume"

    @click.command(verb)
    @click.argument("queue_name", metavar="QUEUE")
    @click.option("--handler", metavar="REF", help="Only the tasks of this handler_ref.")
    @click.option("--dependency", metavar="NAME", help="Only the tasks of this dependency.")
    @click.option("--reason", help="Why (kept in the audit record).")
    @force_option
    @actor_options
    @target_options
    @json_option
    @run_async
    async def command(
        queue_name: str,
        handler: str | None,
        dependency: str | None,
        reason: str | None,
        force: bool,
        actor: str | None,
        audit_log: str | None,
        storage_url: str | None,
        server_url: str | None,
        token: str | None,
        as_json: bool,
    ) -> None:
        if handler is not None and dependency is not None:
            raise click.UsageError("give --handler or --dependency, not both")
        target = open_target(
            storage_url, server_url, token, actor=actor, audit_log=audit_log, create=force
        )
        async with target:
            control = await target.set_paused(
                queue_name, handler, dependency, paused, reason, force
            )
        if as_json:
            echo_json(control)
            return
        what = (
            f"the whole queue {queue_name}"
            if control["kind"] == "queue"
            else f"{control['key']} of queue {queue_name}"
        )
        if control["paused"]:
            pause = control.get("pause") or {}
            by = f" by {pause['by']}" if pause.get("by") else ""
            why = f": {pause['reason']}" if pause.get("reason") else ""
            click.echo(f"paused {what}{by}{why}")
            click.echo(f"lift it: rdq queue resume {queue_name}" + _naming(handler, dependency))
        else:
            click.echo(f"{what} is not paused: its tasks are claimed")

    command.help = (
        ("Pause" if paused else "Resume")
        + " QUEUE, or only its tasks of --handler REF or --dependency NAME. "
        + (
            "No worker or node claims them from its next claim on; they keep their attempts "
            "and submits are still accepted."
            if paused
            else "Their tasks are claimed again from the next claim on."
        )
    )
    return command


def _naming(handler: str | None, dependency: str | None) -> str:
    if handler is not None:
        return f" --handler {handler}"
    if dependency is not None:
        return f" --dependency {dependency}"
    return ""


queue.add_command(_pause_command(True))
queue.add_command(_pause_command(False))
queue.add_command(queue_status)


@click.command()
@click.argument("queue_name", metavar="[QUEUE]", required=False)
@target_options
@json_option
@run_async
async def breakers(
    queue_name: str | None,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """List the breakers of QUEUE (of every queue): open ones first, with the error that
    tripped them and the tasks they hold."""
    async with open_target(storage_url, server_url, token) as target:
        rows, unsupported = await target.breakers(queue_name)
    if as_json:
        echo_json({"breakers": rows, "unsupported": unsupported})
    else:
        print_breakers(rows, unsupported)


@click.command()
@click.argument("queue_name", metavar="[QUEUE]", required=False)
@target_options
@json_option
@run_async
async def limits(
    queue_name: str | None,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """List the limits of QUEUE (of every queue) that hold across the fleet: each one, how
    many tasks of its key hold a claim now, its rate now (lowered after a RetryAfter), and
    the due tasks that wait with its key."""
    async with open_target(storage_url, server_url, token) as target:
        rows, unsupported = await target.limits(queue_name)
    if as_json:
        echo_json({"limits": rows, "unsupported": unsupported})
    else:
        print_limits(rows, unsupported)


@click.group()
def breaker() -> None:
    """Open or close a breaker by hand."""


def _breaker_command(change: Literal["open", "close"]) -> click.Command:
    @click.command(change)
    @click.argument("key")
    @click.option("--queue", "queue_name", required=True, metavar="QUEUE", help="Its queue.")
    @click.option("--reason", help="Why (kept in the audit record).")
    @click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
    @force_option
    @actor_options
    @target_options
    @json_option
    @run_async
    async def command(
        key: str,
        queue_name: str,
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
        if not key.startswith(("handler:", "dep:")):
            raise click.UsageError(
                f"KEY is handler:REF or dep:NAME, not {key!r} (rdq breakers lists them)"
            )
        if change == "open":
            ask(f"open the breaker {key} of queue {queue_name} (held until closed by hand)", yes)
        target = open_target(
            storage_url, server_url, token, actor=actor, audit_log=audit_log, create=force
        )
        async with target:
            found = await target.set_breaker(queue_name, key, change, reason, force)
        if as_json:
            echo_json(found)
        elif found["state"] == "open":
            held = "its tasks" if found.get("held") is None else f"{held_text(found)} task(s)"
            console.print(
                f"breaker {key} of queue {queue_name} is open: {held} are held until it is "
                f"closed by hand (rdq breaker close {key} --queue {queue_name})",
                markup=False,
                highlight=False,
            )
        else:
            ramp = f", let go at {found['rate']}/s rising" if found.get("rate") else ""
            console.print(
                f"breaker {key} of queue {queue_name} is closed{ramp}",
                markup=False,
                highlight=False,
            )

    command.help = (
        "Open the breaker of KEY (handler:REF or dep:NAME) of --queue by hand: its tasks are "
        "held until it is closed by hand. Asks for confirmation (--yes to skip)."
        if change == "open"
        else "Close the breaker of KEY (handler:REF or dep:NAME) of --queue, open or "
        "half-open: the outage is over, and its held tasks are let go over the ramp."
    )
    return command


breaker.add_command(_breaker_command("open"))
breaker.add_command(_breaker_command("close"))


@click.command()
@target_options
@json_option
@run_async
async def workers(
    storage_url: str | None, server_url: str | None, token: str | None, as_json: bool
) -> None:
    """List the registered workers and nodes: live (seen within two heartbeats by the
    store's clock) or silent, what they serve and hold."""
    async with open_target(storage_url, server_url, token) as target:
        rows, as_of, unsupported = await target.workers()
    if as_json:
        echo_json({"workers": rows, "as_of": as_of, "unsupported": unsupported})
    else:
        print_workers(rows, unsupported)
