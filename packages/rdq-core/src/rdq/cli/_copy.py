"""``rdq copy --from URL --to URL``: move every task, with its history, between two stores.

Every queue the source holds (``list_queues``) is read status by status with ``list_tasks``
(attempts included) and written with ``import_tasks``, which stores each task exactly as it
was and is idempotent by id: a task already in the destination is left as it is. After each
page the position is saved in a small state file, so a copy that stops (an outage, Ctrl-C)
goes on where it stopped when run again; running a finished copy again changes nothing. At
the end the counts per queue and status of both stores are compared, and the command fails
unless every one matches.

Copy from a source no worker is using: tasks that change status while the copy runs may be
missed or copied in an older state (the verification then reports the difference).

A payload kept by reference (see :mod:`rdq.blobs`) is copied as its reference when the
destination keeps references too: its blob is put into the destination's blob store
(``--to-blobs``; nothing to do when that is the source's, ``--blobs``) before the task is
written, so no reference of the destination dangles. Into a store without references the
payload is read back and written inline (one above the 1 MiB a row takes is an error).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import click
from rich.console import Console
from rich.table import Table

from rdq.blobs import Blobs, blobs_from, digest_of, reference_of
from rdq.cli._common import echo_json, json_option, run_async
from rdq.cli._default import chosen_storage
from rdq.errors import IDConflict, PayloadMissing, StaleCursor, ValidationError
from rdq.plugins import open_storage
from rdq.spi import Envelope, Page, Stats, Status, Storage, TaskFilter, bounds

__all__ = ["copy"]

_STATE_VERSION = 1
_COUNTS = {
    Status.PENDING: "pending",
    Status.IN_FLIGHT: "in_flight",
    Status.SUCCEEDED: "succeeded",
    Status.DEAD: "dlq_depth",
    Status.CANCELLED: "cancelled",
}


def shown(url: str) -> str:
    """``url`` with its password, if any, masked."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


@dataclass
class CopyState:
    """What a copy has done so far, saved after every page."""

    key: str
    done: list[list[str]] = field(default_factory=list)
    queue: str | None = None
    status: str | None = None
    cursor: str | None = None
    copied: int = 0
    present: int = 0
    corrupt: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """Tasks whose payload blob the source's blob store does not hold (copied as they are)."""

    @classmethod
    def load(cls, path: Path, key: str) -> CopyState | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise click.ClickException(f"cannot read the copy state {path}: {exc}") from None
        if data.get("version") != _STATE_VERSION or data.get("key") != key:
            raise click.ClickException(
                f"{path} belongs to another copy; give --state FILE or --restart"
            )
        data.pop("version")
        data.setdefault("missing", [])
        return cls(**data)

    def save(self, path: Path) -> None:
        data = {"version": _STATE_VERSION, **self.__dict__}
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(data), encoding="utf-8")
        os.replace(partial, path)

    def finished(self, queue: str, status: Status) -> bool:
        return [queue, str(status)] in self.done


class _Progress:
    """On standard error: a line per finished queue and status, and one every two seconds
    in between."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.last = time.monotonic()

    def page(self, state: CopyState, queue: str, status: Status) -> None:
        if time.monotonic() - self.last >= 2.0:
            self.report(state, f"{queue} {status}")

    def report(self, state: CopyState, where: str) -> None:
        self.last = time.monotonic()
        seen = state.copied + state.present + len(state.corrupt)
        click.echo(
            f"  {where}: {seen:,}/{self.total:,} tasks read "
            f"({state.copied:,} copied, {state.present:,} already there)",
            err=True,
        )


async def _exact(store: Storage, stats: Stats, status: Status) -> int:
    """The count of ``status`` in ``stats``, counted page by page if it was an estimate."""
    name = _COUNTS[status]
    count: int = getattr(stats, name)
    if name not in stats.estimated:
        return count
    total, cursor = 0, None
    while True:
        tasks, cursor = await store.list_tasks(
            stats.queue, TaskFilter(status=status), Page(limit=bounds.MAX_LIMIT, cursor=cursor)
        )
        total += len(tasks)
        if cursor is None:
            return total


@dataclass(frozen=True)
class _Payloads:
    """The blob stores of both sides, and whether the destination keeps references."""

    source: Blobs
    destination: Blobs
    by_reference: bool

    async def carried(self, tasks: list[Envelope], state: CopyState) -> list[Envelope]:
        """``tasks`` as the destination takes them: a reference with its blob put there
        first, or (into a store without references) the payload read back."""
        out = []
        for task in tasks:
            reference = reference_of(task)
            if reference is None:
                out.append(task)
                continue
            try:
                if not self.by_reference:
                    out.append(_inline(await self.source.resolve(task)))
                    continue
                if self.destination.store.where != self.source.store.where:
                    digest = digest_of(reference)
                    await self.destination.store.put(digest, await self.source.store.get(digest))
            except PayloadMissing as exc:
                if task.id not in state.missing:
                    state.missing.append(task.id)
                click.echo(f"task {task.id}: {exc}; copied as it is", err=True)
            out.append(task)
        return out


def _inline(task: Envelope) -> Envelope:
    try:
        bounds.check_task(task)
    except ValidationError as exc:
        raise click.ClickException(
            f"task {task.id!r} of queue {task.queue!r}: its payload is kept by reference and the "
            f"destination keeps none (capability payload_refs); inline, {exc}"
        ) from None
    return task


async def _copy_status(
    source: Storage,
    destination: Storage,
    queue: str,
    status: Status,
    state: CopyState,
    state_path: Path,
    batch: int,
    progress: _Progress,
    payloads: _Payloads,
) -> None:
    cursor = state.cursor if (state.queue, state.status) == (queue, str(status)) else None
    while True:
        page = Page(limit=batch, cursor=cursor, include_attempts=True)
        try:
            tasks, following = await source.list_tasks(queue, TaskFilter(status=status), page)
        except StaleCursor:
            if cursor is None:
                raise
            cursor = None  # the saved position no longer applies: read this status again
            continue
        readable = [task for task in tasks if task.corrupt is None]
        for task in tasks:  # a page read again after an interruption names them again
            if task.corrupt is not None and task.id not in state.corrupt:
                state.corrupt.append(task.id)
        if readable:
            readable = await payloads.carried(readable, state)
            try:
                stored = await destination.import_tasks(readable)
            except IDConflict as exc:
                raise click.ClickException(
                    f"task {exc.task_id!r} of queue {queue!r} already exists in queue "
                    f"{exc.existing_queue!r} of the destination; nothing of this page was copied"
                ) from None
            state.copied += sum(stored)
            state.present += len(stored) - sum(stored)
        state.queue, state.status, state.cursor = queue, str(status), following
        if following is None:
            state.done.append([queue, str(status)])
            state.queue = state.status = state.cursor = None
        state.save(state_path)
        progress.page(state, queue, status)
        if following is None:
            return
        cursor = following


@click.command()
@click.option("--from", "source_url", required=True, metavar="URL", help="The store to read.")
@click.option("--to", "destination_url", required=True, metavar="URL", help="The store to fill.")
@click.option(
    "--batch",
    type=click.IntRange(1, bounds.MAX_LIMIT),
    default=500,
    show_default=True,
    help="Tasks per page read and written.",
)
@click.option(
    "--state",
    "state_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where the position is saved (default: .rdq-copy-<id>.json in this directory).",
)
@click.option("--restart", is_flag=True, help="Ignore a saved position and start over.")
@click.option(
    "--blobs",
    "source_blobs",
    metavar="DIR|URL",
    default=None,
    help="The source's blob store, of payloads kept by reference (default: RDQ_BLOBS, else "
    "./rdq-blobs).",
)
@click.option(
    "--to-blobs",
    "destination_blobs",
    metavar="DIR|URL",
    default=None,
    help="The destination's blob store (default: the source's).",
)
@json_option
@run_async
async def copy(
    source_url: str,
    destination_url: str,
    batch: int,
    state_file: Path | None,
    restart: bool,
    source_blobs: str | None,
    destination_blobs: str | None,
    as_json: bool,
) -> None:
    """Copy every task, with its history, from one store to another (resumable, idempotent),
    then check the counts per queue and status of both. Stop the workers first."""
    if source_url == destination_url:
        raise click.UsageError("--from and --to name the same store")
    source_url = chosen_storage(source_url, existing=True)  # a copy never creates its source
    key = hashlib.blake2b(f"{source_url}\0{destination_url}".encode(), digest_size=8).hexdigest()
    state_path = state_file or Path(f".rdq-copy-{key}.json")
    state = None if restart else CopyState.load(state_path, key)
    if state is None:
        state = CopyState(key=key)
    else:
        click.echo(
            f"resuming the copy saved in {state_path} ({state.copied:,} tasks copied so far)",
            err=True,
        )
    async with open_storage(source_url) as source, open_storage(destination_url) as destination:
        await destination.migrate()
        from_blobs = blobs_from(source_blobs)
        payloads = _Payloads(
            from_blobs,
            blobs_from(destination_blobs) if destination_blobs else from_blobs,
            destination.capabilities().payload_refs,
        )
        queues = await source.list_queues()
        total = sum(getattr(s, name) for s in queues for name in _COUNTS.values())
        progress = _Progress(total)
        click.echo(
            f"copying {total:,} tasks of {len(queues)} queue(s) from {shown(source_url)} "
            f"to {shown(destination_url)}",
            err=True,
        )
        for stats in queues:
            for status in _COUNTS:
                if getattr(stats, _COUNTS[status]) == 0 or state.finished(stats.queue, status):
                    continue
                await _copy_status(
                    source,
                    destination,
                    stats.queue,
                    status,
                    state,
                    state_path,
                    batch,
                    progress,
                    payloads,
                )
                progress.report(state, f"{stats.queue} {status} done")
        rows: list[tuple[str, Status, int, int]] = []
        for stats in await source.list_queues():
            there = await destination.stats(stats.queue)
            for status in _COUNTS:
                counts = (
                    await _exact(source, stats, status),
                    await _exact(destination, there, status),
                )
                if any(counts):
                    rows.append((stats.queue, status, *counts))
    problems = []
    mismatched = [row for row in rows if row[2] != row[3]]
    if mismatched:
        problems.append(f"{len(mismatched)} count(s) differ")
    if state.corrupt:
        problems.append(f"{len(state.corrupt)} corrupt task(s) were not copied")
    if state.missing:
        problems.append(f"{len(state.missing)} task(s) refer to a payload blob the source lacks")
    _report(rows, state, problems, as_json)
    if problems:
        message = "the copy is not verified: " + "; ".join(problems)
        message += f" (position kept in {state_path})"
        if as_json:  # the report on stdout says it; one JSON document only
            click.echo(f"Error: {message}", err=True)
            sys.exit(1)
        raise click.ClickException(message)
    state_path.unlink(missing_ok=True)


def _report(
    rows: list[tuple[str, Status, int, int]], state: CopyState, problems: list[str], as_json: bool
) -> None:
    if as_json:
        echo_json(
            {
                "copied": state.copied,
                "already_present": state.present,
                "corrupt": state.corrupt,
                "missing_payloads": state.missing,
                "counts": [
                    {"queue": q, "status": str(s), "source": a, "destination": b}
                    for q, s, a, b in rows
                ],
                "verified": not problems,
                "problems": problems,
            }
        )
        return
    table = Table(title="counts after the copy")
    for column in ("queue", "status", "source", "destination", ""):
        table.add_column(column, justify="right" if column in ("source", "destination") else "left")
    for queue, status, source, destination in rows:
        table.add_row(
            queue,
            str(status),
            f"{source:,}",
            f"{destination:,}",
            "ok" if source == destination else "DIFFERS",
        )
    Console(file=sys.stdout).print(table)
    click.echo(
        f"{state.copied:,} task(s) copied, {state.present:,} already in the destination"
        + (
            f", {len(state.corrupt)} corrupt task(s) skipped: {', '.join(state.corrupt[:20])}"
            if state.corrupt
            else ""
        )
    )
