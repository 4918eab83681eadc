"""Batched completions: many successful attempts recorded with one ``complete_many`` call.

Used when the store advertises ``batch_complete``. :meth:`Completer.submit` queues a success
with an owner (the worker's run); the successes that arrive while a flush is in flight are
sent together by the next one. There is no timer: at low load each completion goes out at
once, under load they batch by themselves. When a flush returns, ``on_flushed`` gets each
owner with ``None`` (recorded) or the reason it was not: ``StaleClaim``/``NotFound`` as
``storage.complete`` would raise them, the exception of a flush that failed as a whole
(``StorageUnavailable``, ``StorageError``...: the attempt is then not known to be recorded
and may be submitted again), or ``CancelledError`` when the completer was cancelled. A
completion is recorded only when its flush returns, so a crash before that leaves the task
IN_FLIGHT for its lease to expire (at-least-once, as with single completions).

No future per completion: the owners hear of their flush through one call per flush.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

from rdq.spi import Completion, Storage

__all__ = ["MAX_FLUSH", "Completer"]

MAX_FLUSH = 500
"""Completions sent by one ``complete_many`` call at most."""

Owner = TypeVar("Owner")

OnFlushed = Callable[[list[tuple[Owner, BaseException | None]]], None]


class Completer(Generic[Owner]):
    """Coalesces concurrent completions of one worker into ``complete_many`` calls."""

    def __init__(
        self,
        storage: Storage,
        on_flushed: OnFlushed[Owner],
        max_flush: int = MAX_FLUSH,
    ) -> None:
        self.storage = storage
        self.max_flush = max_flush
        self._on_flushed = on_flushed
        self._waiting: list[tuple[Completion, Owner]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.closed = False
        """Set by :meth:`cancel`: nothing more is sent."""

    def submit(self, item: Completion, owner: Owner) -> None:
        """Queue a successful attempt, fenced on its token, for the next flush; ``owner``
        is reported back with its result."""
        if self.closed:
            self._on_flushed([(owner, asyncio.CancelledError())])
            return
        self._waiting.append((item, owner))
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(
                self._flush_all(), name="rdq-complete-many"
            )

    async def aclose(self) -> None:
        """Wait for the flush in flight (and what it still has to send) to return."""
        flusher = self._flusher
        if flusher is not None:
            await asyncio.wait([flusher])

    def cancel(self) -> None:
        """Stop flushing; owners still waiting are reported with ``CancelledError``."""
        self.closed = True
        if self._flusher is not None:
            self._flusher.cancel()
        self._fail_waiting()

    async def _flush_all(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[: self.max_flush]
                del self._waiting[: self.max_flush]
                await self._flush(batch)
        finally:
            self._flusher = None
            self._fail_waiting()  # only non-empty if this task was cancelled

    async def _flush(self, batch: list[tuple[Completion, Owner]]) -> None:
        try:
            results = await self.storage.complete_many([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(
                    f"complete_many returned {len(results)} results for {len(batch)} items"
                )
        except asyncio.CancelledError as exc:
            self._on_flushed([(owner, exc) for _, owner in batch])
            raise
        except Exception as exc:
            self._on_flushed([(owner, exc) for _, owner in batch])
            return
        self._on_flushed(
            [(owner, result) for (_, owner), result in zip(batch, results, strict=True)]
        )

    def _fail_waiting(self) -> None:
        waiting, self._waiting = self._waiting, []
        if waiting:
            self._on_flushed([(owner, asyncio.CancelledError()) for _, owner in waiting])
