"""``rdq demo``: watch rdq retry, dead-letter and redrive tasks, in memory, in a few seconds.

No configuration and no server: an in-memory store, one worker and a handful of handlers that
behave like real ones (a flaky payment gateway, a renderer that hangs, a CRM record that is
gone, an image service that keeps failing, a rate-limited API). The demo shows each attempt
as it happens, lists the dead-letter queue, "fixes" the handlers, redrives the DLQ and shows
the redriven tasks succeeding with their whole history.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import shlex
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import click
import structlog
from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

import rdq
from rdq.spi import Attempt, Envelope, Outcome, Page, Selector, Status, Storage

QUEUE = "orders"
SETTLE_TIMEOUT = 45.0
LEASE = 10.0


@dataclass
class DemoState:
    """What the demo handlers consult: whether the operator has "fixed" them yet."""

    fixed: bool = False
    calls: dict[str, int] = field(default_factory=dict)


def build_app(state: DemoState) -> rdq.App:
    """The demo application: one queue with small backoffs, six realistic handlers."""
    app = rdq.App()
    app.queue(
        QUEUE,
        max_attempts=4,
        backoff=rdq.Backoff.exponential(base=0.4, cap=1.6),
        timeout=1.0,
        lease=LEASE,
        concurrency=8,
    )

    @app.handler("send_receipt", queue=QUEUE)
    async def send_receipt(payload: dict[str, str]) -> None:
        await asyncio.sleep(0.05)

    @app.handler("charge_card", queue=QUEUE)
    async def charge_card(payload: dict[str, str], ctx: rdq.TaskContext) -> None:
        await asyncio.sleep(0.05)
        if ctx.attempt < 3:
            raise ConnectionError("payment gateway reset the connection")

    @app.handler("notify_warehouse", queue=QUEUE)
    async def notify_warehouse(payload: dict[str, str], ctx: rdq.TaskContext) -> None:
        if ctx.attempt == 1:
            raise rdq.RetryAfter(0.8, "warehouse API: 429 Too Many Requests, Retry-After: 0.8")

    @app.handler("render_invoice", queue=QUEUE)
    async def render_invoice(payload: dict[str, str]) -> None:
        if not state.fixed:
            await asyncio.sleep(30)  # the renderer hangs; the queue's 1 s timeout cuts it off

    @app.handler("sync_crm_contact", queue=QUEUE)
    def sync_crm_contact(payload: dict[str, str]) -> None:  # a plain function: thread pool
        if not state.fixed:
            raise rdq.Permanent(f"contact {payload['contact']} no longer exists in the CRM")

    @app.handler("resize_image", queue=QUEUE)
    def resize_image(payload: dict[str, str]) -> None:
        if not state.fixed:
            raise RuntimeError("image service returned HTTP 503")

    return app


SUBMISSIONS = [
    rdq.Submission("send_receipt", {"order": "A-1001"}, id="receipt-A-1001"),
    rdq.Submission("charge_card", {"order": "A-1002"}, id="charge-A-1002"),
    rdq.Submission("notify_warehouse", {"order": "A-1002"}, id="ship-A-1002"),
    rdq.Submission(
        "render_invoice",
        {"order": "A-1003"},
        id="invoice-A-1003",
        retry=rdq.RetryOverride(max_attempts=2),  # a per-task override of the queue's 4
    ),
    rdq.Submission("sync_crm_contact", {"contact": "4711"}, id="crm-4711"),
    rdq.Submission("resize_image", {"image": "cat.png"}, id="image-cat"),
    rdq.Submission("send_receipt", {"order": "A-1004"}, id="receipt-A-1004"),
]


class _Quiet:
    """The demo prints its own story; the worker's log lines would only interleave."""

    def _drop(self, *args: object, **kwargs: object) -> None:
        return None

    debug = info = warning = error = exception = _drop


class Watcher:
    """Polls the tasks and prints one line per new attempt, with the retry delay chosen."""

    def __init__(
        self, storage: Storage, console: Console, ids: list[str], seen: dict[str, int] | None = None
    ) -> None:
        """``seen``: attempts already shown per task (a redriven task keeps its history)."""
        self.storage = storage
        self.console = console
        self.ids = ids
        self.seen: dict[str, int] = {i: (seen or {}).get(i, 0) for i in ids}
        self.tasks: dict[str, Envelope] = {}

    async def poll(self) -> None:
        for task_id in self.ids:
            task = await self.storage.get(task_id)
            self.tasks[task_id] = task
            for attempt in task.attempts[self.seen[task_id] :]:
                self.console.print(_event_line(task, attempt))
            self.seen[task_id] = len(task.attempts)

    def settled(self) -> bool:
        return all(
            t.status in (Status.SUCCEEDED, Status.DEAD)
            for t in (self.tasks.get(i) for i in self.ids)
            if t is not None
        ) and len(self.tasks) == len(self.ids)

    def table(self) -> Table:
        table = Table(title="queue 'orders'", expand=False)
        for column in ("task", "handler", "status", "attempts"):
            table.add_column(column)
        for task_id in self.ids:
            task = self.tasks.get(task_id)
            if task is None:
                continue
            table.add_row(task.id, task.handler_ref, _status(task), str(task.attempt_count))
        return table

    async def watch(self, live: Live | None) -> None:
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            await self.poll()
            if live is not None:
                live.update(self.table())
            if self.settled():
                return
            if time.monotonic() > deadline:
                raise click.ClickException("the demo tasks did not settle in time")
            await asyncio.sleep(0.1)


def _status(task: Envelope) -> str:
    if task.status == Status.SUCCEEDED:
        return "[green]succeeded[/]"
    if task.status == Status.DEAD:
        return "[red]dead-lettered[/]"
    if task.status == Status.IN_FLIGHT:
        return "[cyan]running[/]"
    return "[yellow]retrying[/]" if task.attempt_count else "pending"


def _event_line(task: Envelope, attempt: Attempt) -> str:
    head = f"  {task.id:<15} #{attempt.number}  "
    if attempt.outcome == Outcome.SUCCEEDED:
        return head + "[green]✓ succeeded[/]"
    error = f"{attempt.error_type}: {attempt.error_message}"
    label = f"[yellow]{attempt.outcome.value:<9}[/]"
    if task.status == Status.DEAD and task.attempts and task.attempts[-1] is attempt:
        why = "permanent" if attempt.outcome == Outcome.PERMANENT else "retries exhausted"
        return f"{head}{label} {error}  [red]→ dead-lettered ({why})[/]"
    delay = _retry_delay(task, attempt)
    after = f"  → retry in {delay:.2f}s" if delay is not None else "  → retrying"
    return f"{head}{label} {error}{after}"


def _retry_delay(task: Envelope, attempt: Attempt) -> float | None:
    index = task.attempts.index(attempt)
    if index + 1 < len(task.attempts):
        nxt = task.attempts[index + 1].started_at
    else:
        nxt = None
        if task.status == Status.PENDING:
            nxt = task.next_attempt_at
        elif task.status == Status.IN_FLIGHT and task.lease_expires_at is not None:
            nxt = task.lease_expires_at - timedelta(seconds=LEASE)  # when it was claimed
    if nxt is None or attempt.finished_at is None:
        return None
    return max(0.0, (nxt - attempt.finished_at).total_seconds())


def _history(task: Envelope) -> Table:
    table = Table(title=f"{task.id} ({task.handler_ref}), redriven {task.redrive_count}x")
    for column in ("#", "outcome", "error", "started", "took"):
        table.add_column(column)
    origin = task.created_at or (task.attempts[0].started_at if task.attempts else None)
    for a in task.attempts:
        table.add_row(
            str(a.number),
            a.outcome.value,
            f"{a.error_type}: {a.error_message}" if a.error_type else "",
            _offset(origin, a.started_at),
            _span(a.started_at, a.finished_at),
        )
    return table


def _offset(origin: datetime | None, at: datetime | None) -> str:
    if origin is None or at is None:
        return "-"
    return f"+{(at - origin).total_seconds():.2f}s"


def _span(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return "-"
    return f"{(end - start).total_seconds():.2f}s"


async def run_demo(console: Console, storage_url: str = "memory://") -> None:
    """The whole demo on ``storage_url`` (in memory unless told otherwise); raises
    ``click.ClickException`` if something does not settle."""
    from rdq.admin import DLQAdmin
    from rdq.audit import MemoryAuditSink

    state = DemoState()
    app = build_app(state)
    in_memory = storage_url.startswith("memory:")
    where = "An in-memory store" if in_memory else f"The store {storage_url}"
    console.print(
        Panel.fit(
            f"{where} and one worker. Queue 'orders': up to 4 attempts,\n"
            "exponential backoff with full jitter (base 0.4 s, cap 1.6 s), 1 s timeout.",
            title="rdq demo",
        )
    )
    try:
        store = rdq.open_storage(storage_url)
    except rdq.ConfigError:
        if not in_memory:
            raise
        raise click.ClickException(
            "rdq demo runs on the in-memory store: pip install rdq-memory (from a checkout of rdq: "
            "pip install ./packages/rdq-memory)"
        ) from None
    submissions = SUBMISSIONS
    if not in_memory:  # a store that keeps tasks: this run's ids are its own
        stamp = secrets.token_hex(3)
        submissions = [dataclasses.replace(s, id=f"{s.id}-{stamp}") for s in SUBMISSIONS]
    async with store as storage:
        if not in_memory:
            await storage.migrate()
        client = rdq.Client(storage, app)
        subs = await client.submit_many(submissions)
        ids = [s.id for s in subs]
        console.print(f"submitted {len(ids)} tasks; starting a worker\n")
        worker = rdq.Worker(app, storage, grace_period=2.0, maintenance=False, logger=_Quiet())
        run = asyncio.create_task(worker.run())
        try:
            watcher = Watcher(storage, console, ids)
            await _watch(watcher, console)
            console.print(watcher.table())

            admin = DLQAdmin(storage, sinks=[audit := MemoryAuditSink()])
            dead, _ = await admin.list_dlq(QUEUE, None, Page(limit=100, include_attempts=True))
            dlq = Table(title=f"dead-letter queue of 'orders': {len(dead)} tasks")
            for column in ("task", "handler", "attempts", "last error"):
                dlq.add_column(column)
            for task in dead:
                last = task.attempts[-1] if task.attempts else None
                dlq.add_row(
                    task.id,
                    task.handler_ref,
                    str(task.attempt_count),
                    f"{last.outcome.value} {last.error_type}: {last.error_message}" if last else "",
                )
            console.print(dlq)

            console.print("\n[bold]The handlers are fixed now.[/] Redriving the whole DLQ…")
            state.fixed = True
            count = await admin.redrive(
                QUEUE,
                Selector.by_filter(),
                actor="rdq-demo",
                reason="handlers fixed after the incident",
            )
            record = audit.records[-1] if getattr(audit, "records", None) else None
            console.print(f"redriven {count} tasks (audit: {_audit_line(record)})\n")
            redriven = Watcher(
                storage, console, [t.id for t in dead], {t.id: len(t.attempts) for t in dead}
            )
            await _watch(redriven, console)
            for task_id in redriven.ids:
                console.print(_history(redriven.tasks[task_id]))
        finally:
            worker.stop()
            await run
    succeeded = sum(1 for t in watcher.tasks.values() if t.status == Status.SUCCEEDED)
    console.print(
        f"\n[bold green]done:[/] {succeeded} tasks succeeded at first, {len(dead)} were "
        f"dead-lettered, redriven and then succeeded, with their full history kept.\n"
    )
    _print_next_steps(console, storage_url, in_memory)


def next_commands(storage_url: str, in_memory: bool) -> list[str]:
    """Commands that work exactly as printed after this demo: on a store that keeps its
    tasks, looking at what the demo left there; after a run in memory, the same demo on a
    SQLite file (when rdq-sqlite is installed), then looking at it."""
    if in_memory:
        from rdq.plugins import plugins

        if "sqlite" not in plugins().schemes():
            return ["rdq backends"]
        storage_url = "sqlite:///rdq-demo.db"
        first = [f"rdq demo --storage {storage_url}"]
    else:
        first = []
    url = shlex.quote(storage_url)
    token = shlex.quote(f"you:read+submit+admin:{secrets.token_hex(12)}")
    return [
        *first,
        f"rdq stats {QUEUE} --storage {url}",
        f"rdq dlq list {QUEUE} --storage {url}",
        f"rdq server --storage {url} --token {token}",
    ]


def _print_next_steps(console: Console, storage_url: str, in_memory: bool) -> None:
    commands = next_commands(storage_url, in_memory)
    if not in_memory:
        intro = "The tasks stay in that store. Look at them with the CLI and the web UI:"
    elif len(commands) > 1:
        intro = (
            "That ran in memory and is gone. Run it on a file that keeps the tasks, then look "
            "at them with the CLI and the web UI (rdq server serves it):"
        )
    else:
        intro = (
            "That ran in memory and is gone. To keep the tasks, run the demo on a store you "
            "have (rdq demo --storage URL); the installed ones are listed by:"
        )
    console.print("[bold]What to try next[/]")
    console.print(intro, markup=False, highlight=False)
    for command in commands:  # never wrapped: each line is a command to paste
        console.print(f"  {command}", markup=False, highlight=False, soft_wrap=True)
    if len(commands) > 1:
        token = commands[-1].rpartition(":")[2].strip("'")
        console.print(
            f"rdq server serves the DLQ UI on http://127.0.0.1:8080/ui (sign in with the token "
            f"{token}) and the HTTP API under /v1.",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    console.print(
        "docs/engine.md shows the application API; examples/orders is a runnable app.",
        markup=False,
        highlight=False,
    )


def _audit_line(record: object) -> str:
    if record is None:
        return "recorded"
    actor = getattr(record, "actor", "?")
    action = getattr(record, "action", "?")
    count = getattr(record, "count", "?")
    return f"{action} by {actor}, {count} tasks"


async def _watch(watcher: Watcher, console: Console) -> None:
    if console.is_terminal:
        with Live(watcher.table(), console=console, refresh_per_second=10, transient=True) as live:
            await watcher.watch(live)
    else:
        await watcher.watch(None)


@click.command()
@click.option("--no-color", is_flag=True, help="Plain output (also when NO_COLOR is set).")
@click.option(
    "--storage",
    "storage_url",
    default="memory://",
    show_default=True,
    metavar="URL",
    help="Run the demo on this store instead (e.g. sqlite:///demo.db); it is migrated first.",
)
def demo(no_color: bool, storage_url: str) -> None:
    """Watch rdq retry, dead-letter and redrive tasks, in memory, in a few seconds."""
    console = Console(no_color=no_color or None, highlight=False)
    configured, saved = structlog.is_configured(), structlog.get_config()
    # The demo tells its own story; library log lines (the audit line of the redrive) would
    # only interleave with it.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    try:
        asyncio.run(run_demo(console, storage_url))
    except rdq.RdqError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        # as it found it: structlog left unconfigured stays so (rdq's loggers then write
        # through the standard library's logging, not to standard output)
        if configured:
            structlog.configure(**saved)
        else:
            structlog.reset_defaults()
