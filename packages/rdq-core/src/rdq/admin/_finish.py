"""A storage call that changes tasks, awaited to its end even when its caller is cancelled
meanwhile (Ctrl-C, a SIGTERM, a request that went away): a call cut short may have been
applied all the same, and its audit entry could then only say that its count is unknown."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["to_the_end"]

T = TypeVar("T")


async def to_the_end(call: Coroutine[Any, Any, T]) -> tuple[T, bool]:
    """The result of ``call``, and whether the caller was cancelled while it ran (it then
    records what was done and stops). A second cancellation gives up on the call: its effect
    is then unknown."""
    inner = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(inner), False
    except asyncio.CancelledError:
        return await inner, True
