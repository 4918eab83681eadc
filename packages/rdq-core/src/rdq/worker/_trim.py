"""Giving memory freed after a batch of work back to the system (glibc's ``malloc_trim``).

glibc keeps freed memory in its heaps for reuse: after a worker ran tasks with large payloads
(50 of 1 MB at once) its RSS stays at the peak although Python freed every payload
(``python -m bench.memory``: 149 MiB after the batch, 46 MiB idle before it). ``malloc_trim``
hands the free pages back (49 MiB after). A worker calls it when it becomes idle after work,
at most every :data:`INTERVAL` seconds, in a thread (it walks the heaps: milliseconds for a
heap of a few hundred MiB). Elsewhere than glibc (musl, macOS) there is nothing to call and
this does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import math
import platform
import time
from collections.abc import Callable

from rdq.worker._clock import Monotonic

__all__ = ["INTERVAL", "MemoryTrim", "malloc_trim"]

INTERVAL = 10.0
"""Seconds between two trims at least."""


def malloc_trim() -> Callable[[int], object] | None:
    """glibc's ``malloc_trim(pad)``, or None where the C library is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    with contextlib.suppress(OSError, AttributeError):
        trim: Callable[[int], object] = ctypes.CDLL(name).malloc_trim
        return trim
    return None


class MemoryTrim:
    """Trims once the worker is idle after work (:meth:`worked`, then :meth:`idle`), at most
    every ``interval`` seconds."""

    def __init__(
        self,
        interval: float = INTERVAL,
        mono: Monotonic = time.monotonic,
        trim: Callable[[int], object] | None = None,
    ) -> None:
        self.interval = interval
        self.mono = mono
        self._trim = trim if trim is not None else malloc_trim()
        self._worked = False
        self._last = -math.inf
        self._running: asyncio.Future[object] | None = None

    def worked(self) -> None:
        """Tasks were claimed: memory may be freed when they are over."""
        self._worked = True

    def idle(self) -> None:
        """The worker holds no task: trim now if it worked since the last trim and that was
        ``interval`` seconds ago or more."""
        if self._trim is None or not self._worked:
            return
        if self._running is not None and not self._running.done():
            return
        now = self.mono()
        if now - self._last < self.interval:
            return
        self._worked, self._last = False, now
        self._running = asyncio.ensure_future(asyncio.to_thread(self._trim, 0))
        self._running.add_done_callback(_ignore_result)


def _ignore_result(future: asyncio.Future[object]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved, so an error in the call is not reported as unhandled
