"""Batched completions: many successful attempts recorded with one ``complete_many`` call.

Used when the store advertises ``batch_complete``. :meth:`Completer.submit` queues a success
with an owner (the worker's run); up to ``max_flushes`` flushes are in flight at once, and
the successes that arrive while they all are are sent together by the next one. There is no
timer: at low load each completion goes out at once, under load they batch by themselves.
One flush in flight by default; :data:`MAX_FLUSHES` on a store that advertises
``overlapping_completions``: the handlers that ran during a flush hold their slots until
their own write is recorded (a worker frees at most its concurrency's worth early), so with
one flush in flight a worker of quick handlers sits idle for part of every round trip; with
two, the next batch is on its way while the first is written.

When a flush returns, ``on_flushed`` gets each owner with ``None`` (recorded) or the reason
it was not: ``StaleClaim``/``NotFound`` as ``storage.complete`` would raise them, the
exception of a flush that failed as a whole (``StorageUnavailable``, ``StorageError``...:
the attempt is then not known to be recorded and may be submitted again), or
``CancelledError`` when the completer was cancelled. A completion is recorded only when its
flush returns, so a crash before that leaves the task IN_FLIGHT for its lease to expire
(at-least-once, as with single completions).

No future per completion: the owners hear of their flush through one call per flush.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

from rdq.spi import Completion, Storage

__all__ = ["MAX_FLUSH", "MAX_FLUSHES", "Completer"]

MAX_FLUSH = 500
"""Completions sent by one ``complete_many`` call at most."""

MAX_FLUSHES = 2
"""``complete_many`` calls in flight at once at most, on a store that advertises
``overlapping_completions`` (else one)."""

Owner = TypeVar("Owner")

OnFlushed = Callable[[list[tuple[Owner, BaseException | None]]], None]


class Completer(Generic[Owner]):
    """Coalesces concurrent completions of one worker into ``complete_many`` calls."""

    def __init__(
        self,
        storage: Storage,
        on_flushed: OnFlushed[Owner],
        max_flush: int = MAX_FLUSH,
        max_flushes: int = 1,
    ) -> None:
        self.storage = storage
        self.max_flush = max_flush
        self.max_flushes = max_flushes
        self._on_flushed = on_flushed
        self._waiting: list[tuple[Completion, Owner]] = []
        self._flushers: set[asyncio.Task[None]] = set()
        self.closed = False
        """Set by :meth:`cancel`: nothing more is sent."""

    def submit(self, item: Completion, owner: Owner) -> None:
        """Queue a successful attempt, fenced on its token, for the next flush; ``owner``
        is reported back with its result."""
        if self.closed:
            self._on_flushed([(owner, asyncio.CancelledError())])
            return
        self._waiting.append((item, owner))
        if len(self._flushers) < self.max_flushes:
            flusher = asyncio.get_running_loop().create_task(
                self._flush_all(), name="rdq-complete-many"
            )
            self._flushers.add(flusher)

    async def aclose(self) -> None:
        """Wait for the flushes in flight (and what they still have to send) to return."""
        if self._flushers:
            await asyncio.wait(list(self._flushers))

    def cancel(self) -> None:
        """Stop flushing; owners still waiting are reported with ``CancelledError``."""
        self.closed = True
        for flusher in list(self._flushers):
            flusher.cancel()
        self._fail_waiting()

    async def _flush_all(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[: self.max_flush]
                del self._waiting[: self.max_flush]
                await self._flush(batch)
        finally:
            self._flushers.discard(asyncio.current_task())
            if not self._flushers:
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
