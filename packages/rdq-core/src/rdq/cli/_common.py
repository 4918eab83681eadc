"""Options and helpers shared by the commands."""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import click
import msgspec

from rdq.cli._default import storage_option
from rdq.errors import RdqError

__all__ = ["echo_json", "json_option", "run_async", "storage_option"]

P = ParamSpec("P")
T = TypeVar("T")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")


def run_async(fn: Callable[P, Awaitable[T]]) -> Callable[P, T]:
    """Run an async command body; turn rdq errors into one clear line and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return asyncio.run(_as_coroutine(fn(*args, **kwargs)))
        except RdqError as exc:
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


def echo_json(value: Any) -> None:
    click.echo(msgspec.json.format(msgspec.json.encode(value), indent=2).decode())
