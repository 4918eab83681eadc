"""What a handler is and how a handler_ref becomes one.

:class:`Handler` (a registered function and how to call it), :class:`TaskContext` (what the
handler is told about its task), :data:`SchemeInvoker` (the callable that runs ``scheme://…``
refs), :func:`make_handler` (inspecting a function once: async or not, what it takes, the type
its payload converts to) and :func:`import_handler` (the guarded import of a
``pkg.module:function`` ref, which may come from an untrusted producer). The registry of
queues and handlers that uses them is :class:`rdq.App` (:mod:`rdq.app`).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import types
import typing
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, NoReturn

import msgspec

from rdq.errors import ConfigError
from rdq.flow import Breaker, Limit
from rdq.signals import Snooze
from rdq.spi import Envelope

__all__ = [
    "Handler",
    "HandlerImportError",
    "SchemeInvoker",
    "TaskContext",
    "import_handler",
    "import_path",
    "is_under",
    "make_handler",
]

SchemeInvoker = Callable[[Envelope, "TaskContext"], Awaitable[Any]]
"""``invoker(task, ctx)``: runs a task whose handler_ref has the invoker's URL scheme."""


class HandlerImportError(Exception):
    """An allowed ``pkg.module:function`` handler_ref could not be imported; the reason is
    chained as ``__cause__``. Not remembered: the next attempt imports it again."""

    def __init__(self, ref: str, cause: BaseException) -> None:
        self.ref = ref
        super().__init__(f"cannot import handler {ref!r}: {type(cause).__name__}: {cause}")


@dataclasses.dataclass(frozen=True, slots=True)
class TaskContext:
    """What a handler knows about the task it is running."""

    task_id: str
    queue: str
    attempt: int
    """The number of this attempt, 1-based (counts every earlier attempt of the task)."""
    headers: dict[str, str]
    handler_ref: str
    redrive_count: int
    worker_id: str
    task: Envelope

    def snooze(self, delay: float | timedelta, reason: str | None = None) -> NoReturn:
        """Run this task again after ``delay`` without using up an attempt: the same as
        ``raise rdq.Snooze(delay, reason)`` (see :class:`rdq.Snooze`)."""
        raise Snooze(delay, reason)


@dataclasses.dataclass(frozen=True, slots=True)
class Handler:
    """A registered handler and how to call it."""

    name: str
    fn: Callable[..., Any]
    queue: str | None
    is_async: bool
    takes_context: bool
    payload_type: Any = None
    """A type to convert the payload to before the call, or None to pass it as decoded."""
    takes_payload: bool = True
    """False for a handler that takes no arguments at all."""
    dependency: str | None = None
    """The service it calls (its breaker is that dependency's); ``None``: its queue's."""
    breaker: Breaker | None = None
    """Its own breaker settings; ``None``: its queue's."""
    limits: tuple[Limit, ...] = ()
    """Its limits (see :mod:`rdq.flow`): they hold in its queue."""


def make_handler(name: str, fn: Callable[..., Any], queue: str | None) -> Handler:
    """Inspect ``fn`` once: async or not, what it takes (nothing, the payload, or the payload
    and a context), and the type its payload is converted to."""
    target = fn
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    )
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    takes_context = varargs or len(positional) >= 2
    payload_type = None
    if positional:
        try:
            hints = typing.get_type_hints(target)
        except Exception:
            hints = {}
        hint = hints.get(positional[0].name)
        if isinstance(hint, type) and (
            issubclass(hint, msgspec.Struct) or dataclasses.is_dataclass(hint)
        ):
            payload_type = hint
    takes_payload = varargs or bool(positional)
    return Handler(name, fn, queue, is_async, takes_context, payload_type, takes_payload)


def import_path(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of a function (the ref that imports it back)."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        raise ConfigError(f"{fn!r} has no import path; register it with a name", key="handler")
    return f"{module}:{qualname}"


def import_handler(ref: str, prefixes: tuple[str, ...]) -> Handler | None:
    """The handler ``pkg.module:attr`` names; None if the ref is malformed or names something
    that is not a callable defined under one of ``prefixes``; :class:`HandlerImportError` if
    the import fails.

    Handler refs can come from untrusted producers, so the attribute path may not step
    through a module (``myapp.jobs:os.system``) or a private name (``myapp.jobs:_x``), and
    what it finds must be defined in an allowed module: a function a handler module merely
    imports (``from subprocess import run``) is not a handler."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        return None
    parts = attr.split(".")
    if any(not part.isidentifier() or part.startswith("_") for part in parts):
        return None
    try:
        found: Any = importlib.import_module(module_name)
        for part in parts:
            found = getattr(found, part)
            if isinstance(found, types.ModuleType):
                return None
    except Exception as exc:  # a bug at import time, a module not deployed yet, a typo
        raise HandlerImportError(ref, exc) from exc
    if not callable(found):
        return None
    defined_in = getattr(found, "__module__", None) or type(found).__module__
    if not isinstance(defined_in, str) or not is_under(defined_in, prefixes):
        return None
    return make_handler(ref, found, None)


def is_under(module: str, prefixes: tuple[str, ...]) -> bool:
    """True if ``module`` is one of ``prefixes`` or inside one of them."""
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)
