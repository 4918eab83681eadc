"""structlog configuration for rdq: JSON lines in production, a console renderer on a TTY.

Lines about a task carry ``task_id``, ``queue``, ``attempt`` and ``worker_id``.
Call :func:`configure` once at startup (``rdq worker`` does); libraries should not.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

__all__ = ["configure", "get_logger"]

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
    """A structlog logger named ``name``."""
    return structlog.get_logger(name)
