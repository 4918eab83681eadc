"""Logging for rdq: structlog, JSON lines in production, a console renderer on a TTY.

Lines about a task carry ``task_id``, ``queue``, ``attempt`` and ``worker_id``; a failed
attempt's traceback is in ``exception``.

Call :func:`configure` once at startup (``rdq worker`` does). An application that embeds
:class:`rdq.Worker` or :class:`rdq.Client` and does not is left alone: until structlog is
configured (by :func:`configure` or by the application itself), rdq's loggers write through
the standard library's :mod:`logging` (logger names ``rdq.*``), so its handlers and levels
apply, and nothing reaches standard output on rdq's initiative (with no handler at all,
Python prints warnings and errors to standard error).
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

import structlog

__all__ = ["configure", "get_logger"]

if TYPE_CHECKING:
    from collections.abc import MutableMapping

_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}


def configure(json: bool | None = None, level: str = "INFO", stream: Any = None) -> None:
    """Configure structlog (and route stdlib ``logging`` through the same level).

    ``json=None`` picks JSON unless ``stream`` (default stderr) is a terminal. Raises
    ``ValueError`` for an unknown level name."""
    name = level.upper()
    if name not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; expected one of {', '.join(_LEVELS)}")
    out = stream or sys.stderr
    if json is None:
        json = not (hasattr(out, "isatty") and out.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=out.isatty() if hasattr(out, "isatty") else False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info
            if json
            else structlog.processors.StackInfoRenderer(),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[name]),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=_LEVELS[name], stream=out)


def get_logger(name: str = "rdq") -> Any:
    """The logger ``name``: structlog's once structlog is configured, else one that writes
    through the standard library's ``logging.getLogger(name)`` (see the module docstring).
    The choice is made at each call, so configuring later takes effect at once."""
    return _Logger(name)


class _Logger:
    """Forwards each call to structlog when it is configured, else to stdlib logging."""

    __slots__ = ("_stdlib", "_structlog")

    def __init__(self, name: str) -> None:
        self._structlog = structlog.get_logger(name)
        self._stdlib = structlog.wrap_logger(
            logging.getLogger(name),
            processors=[structlog.stdlib.filter_by_level, _as_stdlib_record],
            wrapper_class=structlog.stdlib.BoundLogger,
        )

    def __getattr__(self, name: str) -> Any:
        target = self._structlog if structlog.is_configured() else self._stdlib
        return getattr(target, name)


def _as_stdlib_record(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``event key=value ...`` (and a traceback text on the lines below) as the message of a
    standard ``logging`` record."""
    event = str(event_dict.pop("event", ""))
    exc_info = event_dict.pop("exc_info", None)
    text = event_dict.pop("exception", None)
    stack = event_dict.pop("stack", None)
    fields = " ".join(f"{key}={value!r}" for key, value in event_dict.items())
    message = f"{event} {fields}" if fields else event
    for block in (stack, text):
        if block:
            message += "\n" + str(block).rstrip("\n")
    return (message,), {"exc_info": exc_info} if exc_info else {}
