"""What the terminal shows of an incident, as the console shows it: ``rdq queue status
[QUEUE]`` (each queue's pauses, breakers with their outage's start and length, limits, and
who serves it), the flags ``rdq stats`` puts on a queue that is paused, held or unserved, and
what holds a task and what happens next (``rdq tasks show|list``).

Everything is read through the :class:`~rdq.cli._targets.Target` (a store or a node), and
judged by the store's clock where time matters (the outlooks, the workers).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from rdq.cli._common import echo_json, json_option, run_async
from rdq.cli._options import open_target, target_options
from rdq.cli._render import age, ago, console, held_text, probe_text
from rdq.cli._targets import Target

__all__ = ["flags_of", "incident", "print_outlook", "print_status", "queue_status"]


async def incident(target: Target, queues: list[str]) -> list[dict[str, Any]]:
    """Each queue's stats, pauses, breakers, limits and live workers (of ``queues``, or of
    every queue), with its ``flags``."""
    stats = await target.stats(queues)
    breakers, no_control = await target.breakers(queues[0] if len(queues) == 1 else None)
    pauses, _ = await target.pauses(queues[0] if len(queues) == 1 else None)
    limits, _ = await target.limits(queues[0] if len(queues) == 1 else None)
    workers, _, no_registry = await target.workers()
    if not queues:  # a queue with a pause or a breaker but no task yet is shown too
        listed = {row["queue"] for row in stats}
        held = sorted({x["queue"] for x in (*pauses, *breakers)} - listed)
        stats = sorted([*stats, *await target.stats(held)] if held else stats, key=_name)
    rows = []
    for row in stats:
        name = row["queue"]
        live = [w for w in workers if w["status"] == "live" and name in w["queues"]]
        silent = [w for w in workers if w["status"] == "silent" and name in w["queues"]]
        found = {
            "queue": name,
            "stats": row,
            "pauses": [p for p in pauses if p["queue"] == name],
            "breakers": [b for b in breakers if b["queue"] == name],
            "limits": [v for v in limits if v["queue"] == name],
            "served_by": None if no_registry else [w["id"] for w in live],
            "silent_workers": [
                {"id": w["id"], "held": w["held"], "lapsed": w.get("lapsed", 0)} for w in silent
            ],
            "unsupported": no_control,
        }
        found["flags"] = flags_of(found)
        rows.append(found)
    return rows


def _name(row: dict[str, Any]) -> str:
    return str(row["queue"])


def flags_of(found: dict[str, Any]) -> list[str]:
    """``paused``, ``paused: handler:x``, ``breaker open: dep:psp``, ``held 40``, ``no live
    worker``: what an operator must know of a queue at a glance."""
    flags: list[str] = []
    for pause in found["pauses"]:
        flags.append("paused" if pause["key"] == "*" else f"paused: {pause['key']}")
    for breaker in found["breakers"]:
        if breaker["state"] != "closed":
            state = breaker["state"].replace("_", "-")
            flags.append(f"breaker {state}: {breaker['key']}")
    held = [
        x["held"]
        for x in (*found["pauses"], *(b for b in found["breakers"] if b["state"] != "closed"))
        if x.get("held")
    ]
    if held:
        flags.append(f"held {max(held)}" + ("+" if len(held) > 1 else ""))
    stats = found["stats"]
    if found["served_by"] == [] and (stats["pending"] or stats["in_flight"]):
        flags.append("no live worker")
    if any(w["held"] for w in found["silent_workers"]):
        flags.append("silent worker holds tasks")
    return flags


def _outage(breaker: dict[str, Any], now: datetime) -> str:
    outages = breaker.get("outages") or []
    last = outages[-1] if outages else None
    if last is None:
        return f"since {ago(breaker.get('since'), now)}"
    start = _time(last["start"])
    end = _time(last.get("end")) or now
    lasted = age((end - start).total_seconds()) if start else "-"
    if last.get("end"):
        return f"last outage {ago(last['start'], now)}, lasted {lasted}"
    return f"down since {ago(last['start'], now)} (outage {lasted})"


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return None


def print_status(rows: list[dict[str, Any]]) -> None:
    now = datetime.now(UTC)
    for found in rows:
        stats = found["stats"]
        console.print(
            f"[bold]{found['queue']}[/bold]: {stats['pending']} pending, "
            f"{stats['in_flight']} running, {stats['dlq_depth']} dead"
            + (f", oldest due {age(stats['oldest_pending_age'])}" if stats["pending"] else ""),
            highlight=False,
        )
        served = found["served_by"]
        if served is None:
            console.print("  workers: the store keeps no registry", highlight=False)
        elif served:
            console.print(f"  served by {len(served)} live worker(s): {', '.join(served)}")
        else:
            console.print("  [red]no live worker serves this queue[/red]: nobody claims it")
        for worker in found["silent_workers"]:
            if worker["held"]:
                lapsed = f", {worker['lapsed']} with a lapsed lease" if worker["lapsed"] else ""
                console.print(
                    f"  silent worker {worker['id']} still holds {worker['held']} "
                    f"task(s){lapsed}: they are reclaimed as their leases lapse",
                    highlight=False,
                )
        if found["unsupported"]:
            console.print(f"  controls: {found['unsupported']}", highlight=False, markup=False)
        for pause in found["pauses"]:
            by = f" by {pause['by']}" if pause.get("by") else ""
            why = f": “{pause['reason']}”" if pause.get("reason") else ""
            console.print(
                f"  paused {_key(pause['key'])}{by} {ago(pause.get('at'), now)}{why}; "
                f"holds {held_text(pause)}",
                markup=False,
                highlight=False,
            )
        for breaker in found["breakers"]:
            state = breaker["state"].replace("_", "-")
            line = f"  breaker {breaker['key']}: {state}"
            if breaker["state"] != "closed":
                line += f", {_outage(breaker, now)}"
                if breaker.get("by"):
                    line += f", held open by {breaker['by']}"
                elif breaker["state"] == "open" and breaker.get("until"):
                    line += f", {probe_text(breaker['until'], now)}"
                if breaker.get("error_type"):
                    line += f"; {breaker['error_type']}"
                line += f"; holds {held_text(breaker)}"
            else:
                line += f" ({_outage(breaker, now)})"
            console.print(line, markup=False, highlight=False)
        for limit in found["limits"]:
            text = f"  limit {limit['name']}: {limit['in_use']} in use"
            if limit.get("concurrency") is not None:
                text += f" of {limit['concurrency']}"
                if limit["in_use"] >= limit["concurrency"]:
                    text += " (full)"
            if limit.get("rate") is not None:
                text += f", {limit['rate']}/{limit.get('per', 1.0):g}s"
            console.print(text, markup=False, highlight=False)
        if not (found["pauses"] or found["breakers"] or found["limits"]):
            console.print("  claiming: no pause, breaker or limit holds it", highlight=False)
    if not rows:
        console.print("no queue holds a task yet")


def _key(key: str) -> str:
    return "the whole queue" if key == "*" else key


@click.command("status")
@click.argument("queue_name", metavar="[QUEUE]", required=False)
@target_options
@json_option
@run_async
async def queue_status(
    queue_name: str | None,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """What holds QUEUE (every queue) now: its pauses, its breakers with their outage's start
    and length and what they hold, its limits, and whether a live worker serves it."""
    async with open_target(storage_url, server_url, token) as target:
        rows = await incident(target, [queue_name] if queue_name else [])
    if as_json:
        echo_json({"queues": rows})
    else:
        print_status(rows)


# --- a task's outlook ------------------------------------------------------------------------


def print_outlook(outlook: dict[str, Any]) -> None:
    """What holds the task and what happens next, below ``rdq tasks show``'s fields."""
    console.print(f"[bold]next[/bold]: {outlook['next']}", highlight=False)
    now = datetime.now(UTC)
    for hold in outlook.get("holds") or []:
        text = f"held by {hold['kind']} {_key(hold['key'])}"
        if hold.get("state"):
            text += f" ({hold['state'].replace('_', '-')})"
        if hold.get("since"):
            since = "down since" if hold["kind"] == "breaker" else "since"
            text += f", {since} {ago(hold['since'], now)}"
        if hold.get("by"):
            text += f", by {hold['by']}"
        if hold.get("reason"):
            text += f": “{hold['reason']}”"
        if hold.get("detail"):
            text += f" ({hold['detail']})"
        console.print(text, markup=False, highlight=False)
    attempts = outlook["attempts"]
    line = f"attempts: {attempts['recorded']} since the last redrive, {attempts['charged']} charged"
    if attempts["uncharged"]:
        line += (
            f" ({attempts['uncharged']} not: held while paused or its dependency was down, "
            "or interrupted)"
        )
    if attempts.get("max") is not None:
        line += f"; {attempts['left']} of max_attempts {attempts['max']} left"
    else:
        line += "; max_attempts unknown here (no live worker of its queue registered it)"
    console.print(line, markup=False, highlight=False)
