"""Tables the operator commands print, and the confirm-then-act flow they share."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click
import msgspec
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
from rich.table import Table

from rdq.audit import describe_selector
from rdq.cli._common import (
    EXIT_NOTHING,
    EXIT_PARTLY,
    Interrupted,
    confirm,
    echo_json,
    exit_code,
    prompt,
    stopped_by,
)
from rdq.cli._targets import Action, Target

__all__ = [
    "age",
    "ago",
    "ask",
    "attempts_text",
    "confirm_and_act",
    "outlook_cell",
    "print_audit",
    "print_breakers",
    "print_groups",
    "print_limits",
    "print_queues",
    "print_redrives",
    "print_skipped",
    "print_task",
    "print_tasks",
    "print_workers",
    "probe_text",
]

console = Console()
_DONE = {
    "redrive": "redriven",
    "purge": "purged",
    "cancel": "cancelled",
    "retry_now": "made due now",
}
_SAY = {"retry_now": "retry now"}
"""How a verb reads in a sentence (the others read as they are written)."""


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
    kept = any(row.get("retention") for row in rows)
    if kept:  # what retention wrote to the archive, then removed (all statuses)
        table.add_column("archived", justify="right")
        table.add_column("expired", justify="right")
    flagged = any(row.get("flags") for row in rows)
    if flagged:
        table.add_column("flags", overflow="fold")
    for row in rows:
        cells = [
            row["queue"],
            _count(row, "pending"),
            _count(row, "in_flight"),
            _count(row, "dlq_depth"),
            _count(row, "succeeded"),
            _count(row, "cancelled"),
            age(row["oldest_pending_age"]),
        ]
        if kept:
            record = row.get("retention") or {}
            cells += [
                str(sum((record.get("archived") or {}).values())),
                str(sum((record.get("expired") or {}).values())),
            ]
        if flagged:
            cells.append("[yellow]" + ", ".join(row.get("flags") or []) + "[/yellow]")
        table.add_row(*cells)
    console.print(table)
    if any(row.get("estimated") for row in rows):
        console.print("~ marks an estimate (large counts are estimated by the store)")
    if not rows:
        console.print("no queue holds a task yet")
    elif flagged:
        console.print("what holds a flagged queue: rdq queue status QUEUE")


def attempts_text(outlook: dict[str, Any] | None, task: dict[str, Any]) -> str:
    """``4 (2 charged)`` beside ``attempt_count``."""
    if outlook is None:
        return str(task["attempt_count"])
    attempts = outlook["attempts"]
    if attempts["uncharged"]:
        return f"{attempts['recorded']} ({attempts['charged']} charged)"
    return str(attempts["recorded"])


def outlook_cell(outlook: dict[str, Any] | None) -> str:
    """A short "held by / next" cell for a task list."""
    if outlook is None:
        return "-"
    holds = outlook.get("holds") or []
    if holds:
        first = holds[0]
        key = "the whole queue" if first["key"] == "*" else first["key"]
        if first["kind"] == "pause":
            return f"paused ({key})"
        if first["kind"] == "breaker":
            return f"breaker {first['state'].replace('_', '-')} ({key})"
        return f"limit full ({key})"
    holder = outlook.get("holder")
    if holder is not None:
        lease = holder.get("lease_in")
        if lease is not None and lease <= 0:
            return f"lease lapsed {age(-lease)} ago: reclaim due"
        if holder.get("status") == "silent":
            return f"silent worker ({age(holder.get('silent_for'))})"
        return "running"
    if outlook.get("served") is False and outlook["status"] == "PENDING":
        return "no live worker"
    return "-"


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


def print_tasks(
    title: str,
    status: str,
    tasks: list[dict[str, Any]],
    cursor: str | None,
    outlooks: list[dict[str, Any]] | None = None,
) -> None:
    """A page of tasks; with their ``outlooks``, the attempts charged beside
    ``attempt_count`` and what holds each (or who holds it, for IN_FLIGHT ones)."""
    label, field = _TIME_OF[status]
    table = Table(title=title)
    columns = ["id", "handler_ref", label, "attempts", "redrives", "last error"]
    if status == "IN_FLIGHT":
        columns.insert(3, "worker")
    if outlooks is not None and status in ("PENDING", "IN_FLIGHT"):
        columns.insert(-1, "held by · next" if status == "PENDING" else "holder")
    for column in columns:
        table.add_column(column, overflow="fold")
    seen: list[dict[str, Any] | None] = list(outlooks) if outlooks else [None] * len(tasks)
    for task, outlook in zip(tasks, seen, strict=False):
        row = [
            task["id"],
            task["handler_ref"],
            str(task.get(field) or "-"),
            attempts_text(outlook, task),
            str(task["redrive_count"]),
            last_error(task)[:120],
        ]
        if status == "IN_FLIGHT":
            row.insert(3, str(task.get("claimed_by") or "-"))
        if outlooks is not None and status in ("PENDING", "IN_FLIGHT"):
            row.insert(-1, outlook_cell(outlook))
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


def print_groups(queue: str | None, groups: list[dict[str, Any]]) -> None:
    """The DLQ of ``queue`` by error, or of every queue (a queue column first)."""
    table = Table(title=f"DLQ of {queue} by error" if queue else "every DLQ by error")
    columns = ["count", "error type", "handler_ref", "first", "last"]
    if queue is None:
        columns.insert(0, "queue")
    for column in columns:
        table.add_column(column, overflow="fold", justify="right" if column == "count" else "left")
    for g in groups:
        cells = [
            str(g["count"]),
            g.get("error_type") or "-",
            g["handler_ref"],
            str(g["first_dead_lettered_at"]),
            str(g["last_dead_lettered_at"]),
        ]
        table.add_row(*([g["queue"], *cells] if queue is None else cells))
    console.print(table)
    if groups:
        console.print(
            "act on a group: rdq dlq redrive|purge "
            f"{queue or 'QUEUE'} --error-type TYPE --handler-ref REF --reason …"
        )
    elif queue is None:
        console.print("every DLQ is empty")


def print_audit(entries: list[dict[str, Any]], cursor: str | None) -> None:
    """The trail as a table of four columns whose cells break between words: the time (date
    above clock), who, what (action, queue, tasks) and the selection in words above the
    reason — so an 80-column terminal folds a word only when it is wider than its column."""
    table = Table(title="audit trail (newest first)")
    table.add_column("time", no_wrap=True)
    table.add_column("actor", overflow="fold")
    table.add_column("action", overflow="fold")
    table.add_column("selection · reason", overflow="fold", ratio=1)
    for e in entries:
        failed = " (failed part-way)" if e.get("error") else ""
        reason = e.get("reason")
        table.add_row(
            _audit_time(e.get("time")),
            e["actor"],
            f"{e['action']}\n{e['queue']}\n{e['count']:,} task(s){failed}",
            describe_selector(e.get("selector") or {}) + (f"\n“{reason}”" if reason else ""),
        )
    console.print(table)
    if cursor:
        console.print(f"older: --cursor {cursor}")


def _audit_time(value: Any) -> str:
    """``2026-03-02`` above ``09:14:03Z`` (seconds are enough in a table; ``--json`` has the
    rest)."""
    if not isinstance(value, str) or "T" not in value:
        return str(value or "-")
    day, clock = value.split("T", 1)
    return f"{day}\n{clock[:8]}Z"


async def confirm_and_act(target: Target, action: Action, yes: bool, as_json: bool) -> None:
    """Count the selection (what it matches now, the named tasks it would skip and why), ask
    (unless ``yes``), act with a progress bar, report; exit as the module
    :mod:`rdq.cli._common` says (3: nothing matched, 4: done in part)."""
    seen = await target.preview(action)
    count, skipped = int(seen["count"]), list(seen.get("skipped") or [])
    say = _SAY.get(action.verb, action.verb)
    if skipped and not as_json:
        print_skipped(action, skipped)
    if count == 0:
        _report(action, 0, action.dry_run, as_json, seen, done=False)
        exit_code(EXIT_NOTHING)
    if action.dry_run:
        _report(action, count, True, as_json, seen, done=False)
        return
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(f"{say} of {count} tasks needs --yes when not interactive")
        if not confirm(f"{say} {count} task(s) of queue {action.queue}?"):
            raise click.ClickException("not confirmed; nothing was done")
        if action.reason is None:
            reason = prompt("Reason (kept in the audit trail)")
            action = dataclasses.replace(action, reason=reason.strip() or None)
    progress = _Done()
    with _ProgressBar(count, as_json) as advance:
        try:
            outcome = await target.act(action, progress.tracking(advance))
        except asyncio.CancelledError:
            signum = stopped_by()
            if signum is None:
                raise
            raise Interrupted(
                signum,
                f"{progress.done} task(s) of queue {action.queue} {_DONE[action.verb]} before "
                f"it stopped (the audit trail says so); the rest were not",
            ) from None
    _report(action, int(outcome["done"]), False, as_json, seen, done=True, outcome=outcome)
    if skipped:
        exit_code(EXIT_PARTLY)


class _Done:
    """How many tasks the action reported done so far (said when it is interrupted)."""

    def __init__(self) -> None:
        self.done = 0

    def tracking(
        self, advance: Callable[[int, int | None], None] | None
    ) -> Callable[[int, int | None], None]:
        def report(done: int, total: int | None) -> None:
            self.done = done
            if advance is not None:
                advance(done, total)

        return report


def print_skipped(action: Action, skipped: list[dict[str, Any]]) -> None:
    named = len(set(action.selector.ids or ()))
    verb = _DONE[action.verb]
    some = "none" if len(skipped) >= named else f"{len(skipped)}"
    click.echo(
        f"{some} of the {named} named task(s) can be {verb}:"
        if some == "none"
        else f"{some} of the {named} named task(s) cannot be {verb}:",
        err=True,
    )
    for entry in skipped:
        click.echo(f"  {entry['id']}: {_skip_text(entry)}", err=True)


def _skip_text(entry: dict[str, Any]) -> str:
    from rdq.admin import Skipped

    return msgspec.convert(entry, Skipped).text


def _report(
    action: Action,
    count: int,
    dry_run: bool,
    as_json: bool,
    seen: dict[str, Any] | None = None,
    *,
    done: bool,
    outcome: dict[str, Any] | None = None,
) -> None:
    seen = seen or {}
    if as_json:
        answer = {
            "action": action.verb,
            "queue": action.queue,
            "count": count,
            "dry_run": dry_run,
            "done": done and count > 0,
            "skipped": seen.get("skipped") or [],
            "hint": seen.get("hint"),
        }
        if outcome is not None and action.verb != "retry_now":
            answer |= {
                k: outcome[k] for k in ("matched", "gone", "archived", "archive") if k in outcome
            }
        echo_json(answer)
        return
    if count == 0:
        click.echo("0 tasks match; nothing done" + (" (dry run)" if dry_run else ""))
        if seen.get("hint"):
            click.echo(str(seen["hint"]))
    elif dry_run:
        say = _SAY.get(action.verb, action.verb)
        click.echo(f"{say} would act on {count} task(s) of queue {action.queue} (dry run)")
    elif outcome is not None and action.verb != "retry_now":
        matched, gone = int(outcome.get("matched", count)), int(outcome.get("gone", 0))
        click.echo(
            f"{count} task(s) of queue {action.queue} {_DONE[action.verb]} "
            f"(matched {matched}, already gone {gone})"
        )
        if outcome.get("archive"):
            click.echo(f"archived {outcome.get('archived', count)} first: {outcome['archive']}")
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


# --- flow control and the fleet ----------------------------------------------------------------


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def ago(value: Any, now: Any = None) -> str:
    """``3m ago`` (or ``in 20s``) from an ISO time, judged against ``now`` (this machine's
    clock when not given)."""
    at = _time(value)
    if at is None:
        return "-"
    seconds = ((_time(now) or datetime.now(UTC)) - at).total_seconds()
    if abs(seconds) < 1:
        return "now"
    return f"{age(seconds)} ago" if seconds > 0 else f"in {age(-seconds)}"


def held_text(row: dict[str, Any]) -> str:
    held = row.get("held")
    if held is None:
        return "-"
    return f"{held}+" if row.get("held_more") else str(held)


_STATE = {"open": "[red]open[/red]", "half_open": "[yellow]half-open[/yellow]", "closed": "closed"}


def print_breakers(rows: list[dict[str, Any]], unsupported: str | None) -> None:
    if unsupported:
        console.print(f"no breakers to show: {unsupported}", markup=False, highlight=False)
        return
    table = Table(title="breakers")
    for column in ("queue", "key", "state", "outage", "error", "held"):
        table.add_column(
            column,
            overflow="fold",
            justify="right" if column == "held" else "left",
            no_wrap=column in ("held", "key"),
        )
    for b in rows:
        state = _STATE.get(b["state"], b["state"])
        if b["state"] == "open" and b.get("by"):
            state += f" by {b['by']}"
        elif b["state"] == "open" and b.get("until"):
            state += f", {probe_text(b['until'])}"
        elif b["state"] == "half_open" and b.get("probes_left") is not None:
            state += f", {b['probes_left']} probe(s) left"
        elif b["state"] == "closed" and b.get("rate"):
            state += f", ramping at {b['rate']}/s"
        error = " ".join(x for x in (b.get("error_type"), b.get("error_message")) if x)
        if b.get("sample_task"):
            error += f" (e.g. {b['sample_task']})"
        table.add_row(b["queue"], b["key"], state, _breaker_since(b), error or "-", held_text(b))
    console.print(table)
    if not rows:
        console.print("no breaker has tripped")
    elif any(b["state"] != "closed" for b in rows):
        console.print("close one by hand: rdq breaker close KEY --queue QUEUE --reason …")


def probe_text(until: Any, now: Any = None) -> str:
    """``probes in 3m``, or ``probe due since 5m`` once its cool-down is over (a worker of
    the queue probes it at its next look)."""
    at = _time(until)
    current = _time(now) or datetime.now(UTC)
    if at is not None and at <= current:
        return f"probe due since {age((current - at).total_seconds())}"
    return f"probes {ago(until, now)}"


def _breaker_since(breaker: dict[str, Any]) -> str:
    """An open breaker's outage: its start and how long it has lasted (a failed probe
    re-opens the breaker, but the outage goes on); a closed one's last outage."""
    outages = breaker.get("outages") or []
    last = outages[-1] if outages else None
    if last is None:
        return f"since {ago(breaker.get('since'))}"
    start = _time(last.get("start"))
    end = _time(last.get("end"))
    lasted = age(((end or datetime.now(UTC)) - start).total_seconds()) if start else "-"
    if end is None:
        return f"for {lasted}"
    return f"lasted {lasted}, ended {ago(last.get('end'))}"


def _rate_text(rate: int | None, per: float) -> str:
    if rate is None:
        return "-"
    return f"{rate}/s" if per == 1 else f"{rate}/{per:g}s"


def limit_label(row: dict[str, Any]) -> str:
    """``the whole queue``, ``handler charge``, ``psp``, ``tenant (per value)``."""
    if row["kind"] == "queue":
        return "the whole queue"
    if row["kind"] == "handler":
        return "handler " + str(row["name"]).removeprefix("handler:")
    if row["kind"] == "value":
        return f"{row['name']} (per value)"
    return str(row["name"])


def print_limits(rows: list[dict[str, Any]], unsupported: str | None) -> None:
    if unsupported:
        console.print(f"no limits to show: {unsupported}", markup=False, highlight=False)
        return
    table = Table(title="limits (held by the store's claims, fleet-wide)")
    for column in ("queue", "limit", "concurrency", "in use", "rate", "now", "waiting"):
        table.add_column(
            column,
            overflow="fold",
            justify="right" if column in ("concurrency", "in use", "waiting") else "left",
        )
    for row in rows:
        per_value = row["kind"] == "value"
        concurrency = row.get("concurrency")
        in_use = str(row["in_use"])
        if per_value:
            in_use += f" over {row['keys']} value(s), {row['saturated']} full"
        elif concurrency is not None and row["in_use"] >= concurrency:
            in_use += " (full)"
        now = "-"
        if row.get("lowered_until"):
            now = (
                f"[yellow]{_rate_text(row.get('current_rate'), row.get('current_per', 1.0))}"
                f"[/yellow] until {ago(row['lowered_until'])}"
            )
        elif per_value and row.get("lowered"):
            now = f"[yellow]lowered for {row['lowered']} value(s)[/yellow]"
        elif not per_value and row.get("current_rate") != row.get("rate"):
            now = _rate_text(row.get("current_rate"), row.get("current_per", 1.0))
        waiting = held_text({"held": row.get("waiting"), "held_more": row.get("waiting_more")})
        table.add_row(
            row["queue"],
            limit_label(row),
            "-" if concurrency is None else str(concurrency),
            in_use,
            _rate_text(row.get("rate"), row.get("per", 1.0)),
            now,
            waiting,
        )
        for value in row.get("values") or []:
            table.add_row(
                "",
                f"  {row['name']}={value['value']}",
                "",
                str(value["in_use"]),
                "",
                f"until {ago(value['lowered_until'])}" if value.get("lowered_until") else "",
                "",
            )
    console.print(table)
    if not rows:
        console.print("no limit is declared (rdq.Concurrency / rdq.Rate on a queue or handler)")


def print_workers(rows: list[dict[str, Any]], unsupported: str | None) -> None:
    if unsupported:
        console.print(f"no workers to show: {unsupported}", markup=False, highlight=False)
        return
    table = Table(title="workers")
    for column in ("id", "host", "state", "seen", "queues", "held"):
        table.add_column(
            column,
            overflow="fold",
            justify="right" if column == "held" else "left",
            no_wrap=column == "held",
        )
    for w in rows:
        if w["status"] == "live":
            state = "[green]live[/green]"
        else:
            state = f"[red]silent[/red] for {age(w['silent_for'])}"
        if w.get("state") == "stopping":
            state += ", stopping"
        if w.get("kind") == "node":
            state += " (node)"
        seen = "now" if w["silent_for"] < 1 else f"{age(w['silent_for'])} ago"
        held = f"{w['held']}/{w['concurrency']}" if w.get("kind") != "node" else "-"
        if w["status"] == "silent" and w.get("lapsed"):
            held += f" ({w['lapsed']} lapsed: reclaim due)"
        table.add_row(w["id"], w["host"], state, seen, ", ".join(w["queues"]) or "-", held)
    console.print(table)
    if not rows:
        console.print("no worker is registered on this store")
    elif any(w["status"] == "silent" and w.get("held") for w in rows):
        console.print(
            "a silent worker's held tasks are counted from the store: they fall as other "
            "workers reclaim them once their leases lapse"
        )


def print_redrives(rows: list[dict[str, Any]], unsupported: str | None) -> None:
    if unsupported:
        console.print(f"no paced redrives to show: {unsupported}", markup=False, highlight=False)
        return
    table = Table(title="paced redrives (newest first)")
    for column in ("id", "queue", "status", "progress", "started", "by", "driver", "reason"):
        table.add_column(column, overflow="fold", no_wrap=column in ("id", "progress"))
    for op in rows:
        table.add_row(
            op["id"],
            op["queue"],
            op["status"],
            f"{op['done']}/{op['total']} at {op['rate']:g}/s",
            ago(op.get("started_at")),
            op.get("actor") or "-",
            _driver(op),
            op.get("reason") or "",
        )
    console.print(table)
    if not rows:
        console.print("no paced redrive on this store")
    elif any(op["status"] == "running" for op in rows):
        console.print("cancel one: rdq dlq redrive --cancel ID --queue QUEUE")


def _driver(op: dict[str, Any]) -> str:
    """Who drives a running paced redrive: its driver (``cli:host:pid:…`` in a terminal,
    ``node:…`` on a node), or that nobody does since its driver stopped renewing it (a node
    takes it over within seconds; none running: it waits)."""
    if op["status"] != "running":
        return "-"
    driver = op.get("driver")
    until = _time(op.get("driver_until"))
    if not driver:
        return "nobody yet"
    if until is not None and until < datetime.now(UTC):
        return f"{driver} (stopped {ago(op.get('driver_until'))}: a node takes it over)"
    return str(driver)


def ask(what: str, yes: bool) -> None:
    """Confirm ``what`` (unless ``yes``); refuse without a terminal to ask on. Ctrl-C at the
    question aborts with nothing done; "no" ends the command (exit 1), nothing done."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(f"{what} needs --yes when not interactive")
    if not confirm(f"{what}?"):
        raise click.ClickException("not confirmed; nothing was done")
