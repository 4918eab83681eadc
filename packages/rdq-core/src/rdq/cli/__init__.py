"""The ``rdq`` command line. Each command lives in its own module, imported only when run.

- the commands (:data:`COMMANDS`): ``_backends``, ``_migrate``, ``_worker``, ``_demo``,
  ``_server``, ``_dlq`` (``stats`` and ``dlq``) with ``_dlq_files`` (``dlq export`` and
  ``dlq import``), ``_submit``, ``_tasks``, ``_flow`` (``queue``,
  ``breakers``, ``breaker``, ``limits``, ``workers``), ``_status`` (``queue status``, the
  flags of ``stats``, what holds a task), ``_audit``, ``_copy``, ``_backup``,
  ``_schedules``, ``_keys`` (payload keys and their rotation);
- where the operator commands act: ``_targets`` (the requests and the :class:`Target`),
  ``_direct_target`` (a store), ``_http_target`` (a node);
- what they share: ``_options`` (where to act, filters, who acts), ``_default`` (the store
  used when none is named, and read commands never creating one), ``_render`` (tables,
  confirm-then-act), ``_common`` (running a command: its exit codes, its signals, its
  prompts).
"""

from __future__ import annotations

import importlib
from typing import Any

import click

# command name -> "module:attribute" (relative to this package)
COMMANDS: dict[str, tuple[str, str]] = {
    "backends": ("_backends:backends", "List installed storage backends and broken plugins."),
    "migrate": ("_migrate:migrate", "Create or upgrade the storage schema."),
    "worker": ("_worker:worker", "Run a worker for an application's queues."),
    "demo": ("_demo:demo", "Watch rdq retry, dead-letter and redrive tasks (in memory)."),
    "server": ("_server:server", "Run an rdq server node (HTTP API, DLQ UI, worker)."),
    "stats": ("_dlq:stats", "Show queue statistics (every queue by default)."),
    "submit": ("_submit:submit", "Submit a task (with an id, a delay, a dedup key)."),
    "dlq": (
        "_dlq:dlq",
        "List, inspect, group, redrive (at a pace too), purge, export and import dead-lettered "
        "tasks.",
    ),
    "tasks": ("_tasks:tasks", "Find, inspect, cancel and retry now tasks in any status."),
    "queue": (
        "_flow:queue",
        "Pause and resume a queue, a handler or a dependency; show what holds a queue.",
    ),
    "breakers": ("_flow:breakers", "List the breakers: open ones, what tripped them, held tasks."),
    "breaker": ("_flow:breaker", "Open or close a breaker by hand."),
    "limits": (
        "_flow:limits",
        "List the limits held across the fleet: in use, rate now, what waits.",
    ),
    "workers": ("_flow:workers", "List the workers and nodes: live or silent, what they hold."),
    "audit": ("_audit:audit", "Read the audit trail: every operator action, and breakers' own."),
    "copy": ("_copy:copy", "Copy every task, with its history, to another store."),
    "backup": ("_backup:backup", "Write a checked copy of the store to a file (SQLite)."),
    "schedules": ("_schedules:schedules", "List an application's schedules and their next tick."),
    "keys": ("_keys:keys", "Payload keys: generate, show the keyring, rotate stored payloads."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported when used, so ``rdq --help`` stays fast."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        target, help_text = entry
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(f"{__name__}.{module_name}")
        except ModuleNotFoundError as exc:
            return _unavailable(cmd_name, help_text, f"{exc}")
        command: click.Command = getattr(module, attr)
        return command


def _unavailable(name: str, help_text: str, reason: str) -> click.Command:
    def run(**_: Any) -> None:
        raise click.ClickException(f"'rdq {name}' is not available in this install: {reason}")

    return click.Command(name, callback=run, help=f"{help_text} (unavailable: {reason})")


LOG_LEVEL_KEY = "rdq.log_level"
"""Where ``rdq --log-level`` leaves its choice (the root context's ``meta``)."""


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rdq-core", prog_name="rdq")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    envvar="RDQ_LOG_LEVEL",
    default=None,
    help="Log lines (to stderr) from this level up (env RDQ_LOG_LEVEL; default warning: an "
    "action prints its summary only). rdq worker has its own --log-level.",
)
@click.pass_context
def main(ctx: click.Context, log_level: str | None) -> None:
    """rdq: a durable retry and dead-letter queue.

    Every command that touches storage takes --storage URL (or RDQ_STORAGE):
    sqlite:///rdq.db, postgresql://…, redis://…, mongodb://…, memory://. With none named,
    commands use sqlite:///./rdq.db (the file rdq.db in the working directory) and say so.
    """
    ctx.meta[LOG_LEVEL_KEY] = log_level
