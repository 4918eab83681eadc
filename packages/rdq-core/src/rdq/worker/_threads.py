"""A small pool of daemon threads for plain-function handlers.

Unlike ``concurrent.futures.ThreadPoolExecutor``, a call whose handler overran its timeout can
be *abandoned*: the pool stops counting its thread and may start another in its place, so a
hung handler never starves the pool; and because the threads are daemons, a handler that
never returns cannot keep the process from exiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Call", "HandlerThreads", "ThreadExit"]


class ThreadExit(Exception):
    """A handler raised a ``BaseException`` (``SystemExit``, ``KeyboardInterrupt``…) in its
    thread; ``original`` is that exception. Delivered as an ordinary failure."""

    def __init__(self, original: BaseException) -> None:
        self.original = original
        super().__init__(str(original) or type(original).__name__)


class Call:
    """One submitted call: its future, and whether the pool gave up waiting for it."""

    __slots__ = ("abandoned", "fn", "future", "loop", "thread")
    # ``abandoned`` is set either by HandlerThreads.abandon or by the thread once the call has
    # finished, whichever comes first; only the first one acts on it.

    def __init__(
        self, fn: Callable[[], Any], future: asyncio.Future[Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        self.fn = fn
        self.future = future
        self.loop = loop
        self.abandoned = False
        self.thread: int | None = None
        """The id of the thread running the call, once one picked it up."""


class HandlerThreads:
    """Runs callables in daemon threads, with at most ``size`` non-abandoned threads."""

    def __init__(self, size: int, name: str = "rdq-handler") -> None:
        self._size = max(1, size)
        self._name = name
        self._work: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._counted = 0  # live threads not running an abandoned call
        self._idle = 0
        self._pending = 0
        self._serial = 0

    def submit(self, fn: Callable[[], Any]) -> Call:
        """Run ``fn()`` in a pool thread; ``call.future`` (of the running loop) gets its result
        or exception (a ``BaseException`` arrives wrapped in :class:`ThreadExit`)."""
        loop = asyncio.get_running_loop()
        call = Call(fn, loop.create_future(), loop)
        with self._lock:
            self._pending += 1
            if self._idle < self._pending and self._counted < self._size:
                self._start_thread()
        self._work.put(call)
        return call

    def abandon(self, call: Call) -> None:
        """Stop waiting for ``call`` (its handler overran). Its thread exits when the handler
        returns, if ever; another thread may start in its place now."""
        with self._lock:
            if call.abandoned:
                return
            call.abandoned = True
            self._counted -= 1
            if self._idle < self._pending and self._counted < self._size:
                self._start_thread()

    def close(self) -> None:
        """Let the idle threads exit; busy ones exit after their call."""
        with self._lock:
            count = self._counted
        for _ in range(count):
            self._work.put(None)

    def _start_thread(self) -> None:
        self._counted += 1
        self._serial += 1
        thread = threading.Thread(
            target=self._run, name=f"{self._name}-{self._serial}", daemon=True
        )
        thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            call = self._work.get()
            with self._lock:
                self._idle -= 1
                if call is None:
                    self._counted -= 1
                    return
                self._pending -= 1
            call.thread = threading.get_ident()
            try:
                outcome: tuple[Any, BaseException | None] = (call.fn(), None)
            except Exception as exc:
                outcome = (None, exc)
            except BaseException as exc:  # a handler must not kill its thread
                outcome = (None, ThreadExit(exc))
            with self._lock:
                abandoned = call.abandoned
                call.abandoned = True  # finished: too late to abandon it now
            if not abandoned:
                _deliver(call, *outcome)
            else:
                return  # a replacement took this thread's place


def _deliver(call: Call, result: Any, exc: BaseException | None) -> None:
    def settle() -> None:
        if call.future.done():
            return
        if exc is not None:
            call.future.set_exception(exc)
        else:
            call.future.set_result(result)

    with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
        call.loop.call_soon_threadsafe(settle)
