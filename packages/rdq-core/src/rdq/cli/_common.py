"""Options and helpers shared by the commands: running a command's body, its exit codes, and
the signals that stop it.

======  ==========================================================================
exit    when
======  ==========================================================================
0       done as asked (a listing, an action, a dry run that counted tasks)
1       an error: one line says what (``Error: …``); nothing was done, or the line
        says how much was
2       a usage error (an unknown option, a missing argument)
3       nothing matched: the selection holds no task, or no named task can be
        acted on; nothing was done
4       done in part: the action ran, but some of the named tasks were not acted on
        (each is named, with why)
130     interrupted by Ctrl-C (SIGINT): at a prompt nothing was done; during an
        action, what was done is said (and audited); 129 for SIGHUP, 143 for SIGTERM
======  ==========================================================================

A command body runs on an event loop whose SIGINT, SIGHUP and SIGTERM cancel it: what it was
doing stops cleanly (a store call under way finishes first, so the audit entry counts what
was applied; a paced redrive driven here is cancelled, not left to a node). A prompt
(:func:`confirm`, :func:`prompt`) blocks the loop, so while it waits the signals act at once:
Ctrl-C aborts it and nothing is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, NoReturn, ParamSpec, TypeVar

import click
import msgspec

from rdq.cli._default import storage_option
from rdq.errors import RdqError, UnknownName

__all__ = [
    "EXIT_ERROR",
    "EXIT_NOTHING",
    "EXIT_PARTLY",
    "Interrupted",
    "confirm",
    "echo_json",
    "exit_code",
    "fail",
    "json_option",
    "prompt",
    "run_async",
    "say",
    "stopped_by",
    "storage_option",
]

EXIT_ERROR = 1
"""An error (``Error: …``)."""
EXIT_NOTHING = 3
"""Nothing matched: nothing was done."""
EXIT_PARTLY = 4
"""Done in part: some named tasks were not acted on (each said, with why)."""
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)
"""The signals that stop a command cleanly."""


class Interrupted(Exception):
    """A signal stopped the command; ``said`` is what it had done (printed before exiting)."""

    def __init__(self, signum: int, said: str | None = None) -> None:
        self.signum = signum
        self.said = said
        super().__init__(said or signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def exit_code(code: int) -> NoReturn:
    """Exit with ``code`` (the summary has been printed)."""
    raise click.exceptions.Exit(code)


P = ParamSpec("P")
T = TypeVar("T")
json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON instead of tables (errors too)."
)


def run_async(fn: Callable[P, Awaitable[T]]) -> Callable[P, T]:
    """Run an async command body; turn rdq errors into one clear line and exit code 1, and
    a stopping signal into a clean stop (see the module's table of exit codes).

    With ``--json`` (an ``as_json`` argument that is true) errors are printed as JSON on
    stdout instead: ``{"error": {"type": …, "message": …, "field": …}}``."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        as_json = bool(kwargs.get("as_json"))
        try:
            return asyncio.run(_stoppable(fn(*args, **kwargs)))
        except RdqError as exc:
            fail(exc, as_json)
        except click.ClickException as exc:
            if not as_json:
                raise
            _json_error(type(exc).__name__, exc.format_message(), None)
            sys.exit(exc.exit_code)
        except Interrupted as exc:
            name = signal.Signals(exc.signum).name
            say(f"interrupted ({name}): {exc.said or 'stopped'}")
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:  # a second Ctrl-C while the first one's cleanup ran
            say("interrupted (SIGINT)")
            sys.exit(128 + signal.SIGINT)

    return wrapper


def say(text: str) -> None:
    """``text`` on standard error, if it is still there (a SIGHUP takes the terminal away)."""
    with contextlib.suppress(OSError, ValueError):
        click.echo(text, err=True)


def fail(exc: RdqError, as_json: bool) -> NoReturn:
    """Exit 1 with ``exc`` as one line (or as a JSON error object with ``--json``)."""
    if isinstance(exc, UnknownName):
        text = f"{exc.message}; nothing was read"
        if exc.forceable:
            text = f"{exc.message}; nothing was done (--force acts on it as a name for the future)"
        if as_json:
            _json_error(type(exc).__name__, text, exc.field)
            sys.exit(EXIT_ERROR)
        raise click.ClickException(text) from None
    if as_json:
        _json_error(type(exc).__name__, _message(exc), getattr(exc, "field", None))
        sys.exit(EXIT_ERROR)
    raise click.ClickException(str(exc)) from None


def _message(exc: RdqError) -> str:
    message = getattr(exc, "message", None)
    return message if isinstance(message, str) else str(exc)


def _json_error(kind: str, message: str, field: str | None) -> None:
    echo_json({"error": {"type": kind, "message": message, "field": field}})


async def _stoppable(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` in a task that SIGINT, SIGHUP and SIGTERM cancel: the first one
    cancels it (its cleanup runs), a second one cancels the cleanup too. A cancellation by a
    signal ends as :class:`Interrupted` (unless the body raised one itself, saying more)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    received = _received
    received.clear()

    def stop(signum: int) -> None:
        if signum in _at_prompts:  # a prompt took it already (it also wakes the loop)
            _at_prompts.remove(signum)
            return
        received.append(signum)
        if task is not None:
            task.cancel()

    installed = []
    for signum in STOPPING_SIGNALS:
        try:
            loop.add_signal_handler(signum, stop, signum)
        except (RuntimeError, ValueError, NotImplementedError):  # not the main thread
            continue
        installed.append(signum)
    try:
        return await awaitable
    except asyncio.CancelledError:
        if not received:
            raise
        raise Interrupted(received[0]) from None
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


_received: list[int] = []
"""The stopping signals the running command received."""


def stopped_by() -> int | None:
    """The signal that stopped the running command (``None``: none did)."""
    return _received[0] if _received else None


_at_prompts: list[int] = []
"""The signals a prompt took: each also wakes the event loop later, which must not take it
for a second one."""


def _at_prompt(signum: int, frame: object) -> None:
    _at_prompts.append(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def _prompt_signals() -> Iterator[None]:
    """While a prompt blocks the event loop, the stopping signals interrupt the prompt itself
    (the loop's own handlers would only run once it returns: a first Ctrl-C would be
    swallowed and the command would go on)."""
    _at_prompts.clear()
    saved = {}
    for signum in STOPPING_SIGNALS:
        try:
            saved[signum] = signal.signal(signum, _at_prompt)
        except ValueError:  # not the main thread: leave the signals as they are
            break
    try:
        yield
    except click.Abort:
        if _at_prompts:
            raise Interrupted(_at_prompts[0], "at the prompt; nothing was done") from None
        raise click.ClickException("no answer (end of input); nothing was done") from None
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def confirm(question: str) -> bool:
    """Ask ``question`` (default no) on the terminal; Ctrl-C aborts the command with nothing
    done (:class:`Interrupted`)."""
    with _prompt_signals():
        return bool(click.confirm(question, default=False))


def prompt(question: str) -> str:
    """Ask for a line of text (empty allowed); Ctrl-C aborts as in :func:`confirm`."""
    with _prompt_signals():
        return str(click.prompt(question, default="", show_default=False))


def echo_json(value: Any) -> None:
    click.echo(msgspec.json.format(msgspec.json.encode(value), indent=2).decode())
