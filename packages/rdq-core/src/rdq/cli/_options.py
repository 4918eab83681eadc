"""Options the operator commands share: where to act, filters, times, who acts."""

from __future__ import annotations

import getpass
import os
import socket
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from rdq.cli import LOG_LEVEL_KEY
from rdq.cli._default import DEFAULT_STORAGE, STORAGE_ENV, chosen_storage
from rdq.cli._direct_target import DirectTarget
from rdq.cli._http_target import HttpTarget
from rdq.cli._targets import Target
from rdq.spi import DLQFilter

__all__ = [
    "AWARE",
    "action_options",
    "actor_options",
    "check_selection",
    "filter_options",
    "force_option",
    "open_target",
    "target_options",
]


def _apply(fn: Callable[..., Any], options: list[Callable[..., Any]]) -> Callable[..., Any]:
    for option in reversed(options):
        fn = option(fn)
    return fn


FORCE_HELP = (
    "Act on a name nothing on the store knows yet (no task, worker or control names it): "
    "without it such a name is refused as a typo, with the closest known one."
)
force_option = click.option("--force", is_flag=True, help=FORCE_HELP)


def action_options(all_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--all`` (helped by ``all_help``), ``--dry-run``, ``--reason``, ``--yes``,
    ``--force``: what every bulk action (redrive, purge, cancel, retry now) takes."""

    def options(fn: Callable[..., Any]) -> Callable[..., Any]:
        return _apply(
            fn,
            [
                click.option("--all", "everything", is_flag=True, help=all_help),
                click.option("--dry-run", is_flag=True, help="Only count the selected tasks."),
                click.option("--reason", help="Why (kept in the audit record)."),
                click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation."),
                force_option,
            ],
        )

    return options


def archive_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--archive`` and ``--no-archive`` for a purge done directly on a store."""
    return _apply(
        fn,
        [
            click.option(
                "--archive",
                metavar="DIR|MODULE:SINK",
                help="With --storage: write every purged task here before it is deleted "
                "(default: RDQ_ARCHIVE, else ./rdq-archive).",
            ),
            click.option(
                "--no-archive",
                is_flag=True,
                help="With --storage: delete without writing the tasks to an archive first.",
            ),
        ],
    )


def check_selection(ids: tuple[str, ...], filtered: bool, everything: bool, example: str) -> None:
    """Exactly one of: task ids, a filter, ``--all`` (``example`` names a filter option)."""
    if ids and (filtered or everything):
        raise click.UsageError("give task ids or a filter (or --all), not both")
    if not ids and not filtered and not everything:
        raise click.UsageError(f"give task ids, a filter ({example}, …), or --all")


def target_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--storage URL`` or ``--server URL --token T``."""
    return _apply(
        fn,
        [
            click.option(
                "--storage",
                "storage_url",
                envvar=list(STORAGE_ENV),
                metavar="URL",
                help=f"Work on this store directly (env RDQ_STORAGE; default {DEFAULT_STORAGE}).",
            ),
            click.option(
                "--server",
                "server_url",
                envvar="RDQ_SERVER_URL",
                metavar="URL",
                help="Work through this rdq server node (env RDQ_SERVER_URL).",
            ),
            click.option(
                "--token",
                envvar="RDQ_TOKEN",
                metavar="TOKEN",
                help="Bearer token for --server (env RDQ_TOKEN).",
            ),
        ],
    )


def actor_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--actor`` and ``--audit-log`` for actions done directly on a store."""
    return _apply(
        fn,
        [
            click.option(
                "--actor",
                envvar="RDQ_ACTOR",
                help="Who you are, for the audit record with --storage (default user@host).",
            ),
            click.option(
                "--audit-log",
                envvar="RDQ_AUDIT_LOG",
                metavar="FILE",
                help="With --storage: also append the audit record to this JSON-lines file.",
            ),
        ],
    )


class _AwareDateTime(click.ParamType[datetime]):
    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            self.fail(f"{value!r} is not an RFC 3339 time", param, ctx)
        if parsed.tzinfo is None:
            self.fail(f"{value!r} has no UTC offset (add Z or +HH:MM)", param, ctx)
        try:
            in_utc = parsed.astimezone(UTC)
        except OverflowError:
            in_utc = None
        if in_utc is None or not 1 <= in_utc.year <= 9999:
            self.fail(f"{value!r} is out of range (years 1-9999 in UTC)", param, ctx)
        return in_utc


AWARE = _AwareDateTime()


def filter_options(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--error-type``, ``--handler-ref``, ``--after``, ``--before`` (``what`` names the time
    they bound, e.g. "Dead-lettered")."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        return _apply(
            fn,
            [
                click.option("--error-type", help="Only tasks whose last error has this type."),
                click.option("--handler-ref", help="Only tasks with this handler_ref."),
                click.option(
                    "--after",
                    type=AWARE,
                    metavar="TIME",
                    help=f"{what} at or after TIME (RFC 3339 with offset).",
                ),
                click.option(
                    "--before",
                    type=AWARE,
                    metavar="TIME",
                    help=f"{what} before TIME (RFC 3339 with offset).",
                ),
            ],
        )

    return decorate


def open_target(
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    *,
    actor: str | None = None,
    audit_log: str | None = None,
    create: bool = False,
    archive: str | None = None,
    no_archive: bool = False,
) -> Target:
    """Where the command acts: the node ``server_url`` names, or a store (which must exist
    unless ``create``: see :func:`rdq.cli._default.chosen_storage`). On a store, a purge
    archives what it deletes in ``archive`` (a directory or ``module:attribute``; default
    ``RDQ_ARCHIVE``, else ``./rdq-archive``) unless ``no_archive``; through a node, the node's
    setting decides."""
    if storage_url and server_url:
        raise click.UsageError("give --storage or --server, not both")
    if server_url:
        if not token:
            raise click.UsageError("--server needs --token (or RDQ_TOKEN)")
        return HttpTarget(server_url, token)
    _log_to_stderr()
    if archive is not None and no_archive:
        raise click.UsageError("give --archive or --no-archive, not both")
    return DirectTarget(
        chosen_storage(storage_url, existing=not create),
        actor=actor or _default_actor(),
        audit_log=audit_log,
        archive=None if no_archive else (archive or ""),
    )


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time (it may be swapped, as in tests)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


def _log_to_stderr() -> None:
    """Log lines go to stderr, so ``--json`` output stays parseable, and only from WARNING
    up unless asked (``rdq --log-level info …`` or ``RDQ_LOG_LEVEL``): an action prints its
    summary and nothing else (its audit entry is in the store's trail, ``rdq audit``)."""
    from rdq import logging as rdq_logging

    rdq_logging.configure(stream=_CurrentStderr(), level=log_level())


def log_level() -> str:
    """The level ``rdq --log-level`` (or ``RDQ_LOG_LEVEL``) asked for, else WARNING."""
    context = click.get_current_context(silent=True)
    asked = context.find_root().meta.get(LOG_LEVEL_KEY) if context is not None else None
    return str(asked or os.environ.get("RDQ_LOG_LEVEL") or "WARNING")


def _default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def dlq_filter(
    error_type: str | None,
    handler_ref: str | None,
    after: datetime | None,
    before: datetime | None,
) -> DLQFilter | None:
    """The DLQ filter of the filter options (``None`` when none is given)."""
    if not any(v is not None for v in (error_type, handler_ref, after, before)):
        return None
    return DLQFilter(
        error_type=error_type,
        handler_ref=handler_ref,
        dead_lettered_after=after,
        dead_lettered_before=before,
    )
