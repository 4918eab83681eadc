"""The event loop ``rdq worker`` runs on: uvloop when it is installed (the ``rdq-core[uvloop]``
extra), else asyncio's own. ``RDQ_EVENT_LOOP=asyncio`` keeps asyncio's loop even then.

An application that runs :class:`rdq.Worker` itself chooses its own loop; nothing in the engine
depends on which one it is."""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["loop_factory", "run"]

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory when it is installed and not turned off, else None (asyncio's)."""
    if os.environ.get("RDQ_EVENT_LOOP", "").strip().lower() == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop :func:`loop_factory` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
