"""Options and helpers shared by the commands."""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, ParamSpec, TypeVar

import click
import msgspec

from rdq.cli._default import storage_option
from rdq.errors import RdqError

__all__ = ["echo_json", "fail", "json_option", "run_async", "storage_option"]

P = ParamSpec("P")
T = TypeVar("T")
json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON instead of tables (errors too)."
)


def run_async(fn: Callable[P, Awaitable[T]]) -> Callable[P, T]:
    """Run an async command body; turn rdq errors into one clear line and exit code 1.

    With ``--json`` (an ``as_json`` argument that is true) errors are printed as JSON on
    stdout instead: ``{"error": {"type": …, "message": …, "field": …}}``."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        as_json = bool(kwargs.get("as_json"))
        try:
            return asyncio.run(_as_coroutine(fn(*args, **kwargs)))
        except RdqError as exc:
            fail(exc, as_json)
        except click.ClickException as exc:
            if not as_json:
                raise
            _json_error(type(exc).__name__, exc.format_message(), None)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper


def fail(exc: RdqError, as_json: bool) -> NoReturn:
    """Exit 1 with ``exc`` as one line (or as a JSON error object with ``--json``)."""
    if as_json:
        _json_error(type(exc).__name__, _message(exc), getattr(exc, "field", None))
        sys.exit(1)
    raise click.ClickException(str(exc)) from None


def _message(exc: RdqError) -> str:
    message = getattr(exc, "message", None)
    return message if isinstance(message, str) else str(exc)


def _json_error(kind: str, message: str, field: str | None) -> None:
    echo_json({"error": {"type": kind, "message": message, "field": field}})


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


def echo_json(value: Any) -> None:
    click.echo(msgspec.json.format(msgspec.json.encode(value), indent=2).decode())
