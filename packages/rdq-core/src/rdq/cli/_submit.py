"""``rdq submit``: one task from the command line, on a store or through a node — with an id
(idempotent), a delay, a priority, headers, and a dedup key folding it into the live task that
holds the key (skip, replace, extend, debounce)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from rdq.cli._common import echo_json, json_option, run_async
from rdq.cli._options import actor_options, open_target, target_options

__all__ = ["submit"]

_SAID = {
    "added": "added task {id} to queue {queue}",
    "skipped": "skipped: task {id} of queue {queue} holds it already",
    "replaced": "replaced the payload and headers of task {id} of queue {queue}",
    "extended": "extended the dedup window of task {id} of queue {queue}",
}


def _payload(text: str | None) -> Any:
    """JSON text, ``@FILE`` (JSON in a file) or ``-`` (JSON on standard input)."""
    if text is None:
        return None
    if text == "-":
        text = sys.stdin.read()
    elif text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise click.BadParameter(f"cannot read {text[1:]}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="PAYLOAD") from None


def _header(pairs: tuple[str, ...]) -> dict[str, str] | None:
    headers = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r}: expected NAME=VALUE", param_hint="--header")
        headers[name] = value
    return headers or None


@click.command()
@click.argument("handler")
@click.argument("payload", required=False)
@click.option("--queue", help="The queue (default: default).")
@click.option("--id", "task_id", help="The task's id (submitting it again changes nothing).")
@click.option("--delay", type=click.FloatRange(0), help="Seconds until it is first due.")
@click.option("--priority", type=click.IntRange(-10, 10), help="-10..10, higher first.")
@click.option("--header", "headers", multiple=True, metavar="NAME=VALUE", help="Repeatable.")
@click.option("--dedup-key", help="Fold it into the live task that holds this key.")
@click.option(
    "--dedup-window", type=click.FloatRange(0, min_open=True), help="Seconds the key is held."
)
@click.option(
    "--dedup-mode",
    type=click.Choice(["skip", "replace", "extend", "debounce"]),
    default="skip",
    show_default=True,
    help="What a submission of a held key does.",
)
@click.option(
    "--dedup-max-age",
    type=click.FloatRange(0, min_open=True),
    help="debounce: never put off later than this many seconds after the first submission.",
)
@actor_options
@target_options
@json_option
@run_async
async def submit(
    handler: str,
    payload: str | None,
    queue: str | None,
    task_id: str | None,
    delay: float | None,
    priority: int | None,
    headers: tuple[str, ...],
    dedup_key: str | None,
    dedup_window: float | None,
    dedup_mode: str,
    dedup_max_age: float | None,
    actor: str | None,
    audit_log: str | None,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Submit a task for HANDLER with PAYLOAD (JSON; @FILE reads it from a file, - from
    standard input). With --dedup-key it is folded into the live task that holds the key, as
    --dedup-mode says; the answer says what happened (added, skipped, replaced, extended)."""
    request: dict[str, Any] = {
        "handler_ref": handler,
        "payload": _payload(payload),
        "queue": queue,
        "id": task_id,
        "delay": delay,
        "priority": priority,
        "headers": _header(headers),
    }
    if dedup_key is not None:
        request.update(
            dedup_key=dedup_key,
            dedup_window=dedup_window,
            dedup_mode=dedup_mode,
            dedup_max_age=dedup_max_age,
        )
    elif dedup_window is not None or dedup_max_age is not None or dedup_mode != "skip":
        raise click.UsageError("the --dedup-* options need --dedup-key")
    async with open_target(
        storage_url, server_url, token, actor=actor, audit_log=audit_log, create=True
    ) as target:
        outcome, task = await target.submit({k: v for k, v in request.items() if v is not None})
    if as_json:
        echo_json({"outcome": outcome, "task": task})
    else:
        click.echo(_SAID.get(outcome, outcome + ": task {id}").format(**task))
