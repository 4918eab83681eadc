"""Batched completions: many successful attempts recorded with one ``complete_many`` call.

Used when the store advertises ``batch_complete``. :meth:`Completer.complete` behaves like
``storage.complete`` for the caller (it returns when the attempt is recorded and raises
``StaleClaim``, ``NotFound`` or the storage error of its flush), but the calls that arrive
while a flush is in flight are sent together by the next one. There is no timer: at low load
each completion goes out at once, under load they batch by themselves. A completion is recorded
only when its flush returns, so a crash before that leaves the task IN_FLIGHT for its lease to
expire (at-least-once, as with single completions).
"""

from __future__ import annotations

import asyncio

from rdq.spi import Attempt, Completion, Storage

__all__ = ["MAX_FLUSH", "Completer"]

MAX_FLUSH = 500
"""Completions sent by one ``complete_many`` call at most."""


class Completer:
    """Coalesces concurrent completions of one worker into ``complete_many`` calls."""

    def __init__(self, storage: Storage, max_flush: int = MAX_FLUSH) -> None:
        self.storage = storage
        self.max_flush = max_flush
        self._waiting: list[tuple[Completion, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    def submit(self, task_id: str, token: str, attempt: Attempt) -> asyncio.Future[None]:
        """Queue a successful attempt, fenced on ``token``, for the next flush; the future
        resolves as :meth:`complete` returns or raises."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((Completion(task_id, token, attempt), future))
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(
                self._flush_all(), name="rdq-complete-many"
            )
        return future

    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        """Record a successful attempt, fenced on ``token``, in the next flush.

        Raises ``StaleClaim``/``NotFound`` as ``storage.complete`` would, or the exception of
        a flush that failed as a whole (``StorageUnavailable``, ``StorageError``...): the
        attempt is then not known to be recorded and the caller may retry."""
        await self.submit(task_id, token, attempt)

    async def aclose(self) -> None:
        """Wait for the flush in flight (and what it still has to send) to return."""
        flusher = self._flusher
        if flusher is not None:
            await asyncio.wait([flusher])

    def cancel(self) -> None:
        """Stop flushing; callers still waiting get ``CancelledError``."""
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

    async def _flush(self, batch: list[tuple[Completion, asyncio.Future[None]]]) -> None:
        try:
            results = await self.storage.complete_many([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(
                    f"complete_many returned {len(results)} results for {len(batch)} items"
                )
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():  # its caller was cancelled meanwhile
                continue
            if result is None:
                future.set_result(None)
            else:
                future.set_exception(result)

    def _fail_waiting(self) -> None:
        waiting, self._waiting = self._waiting, []
        for _, future in waiting:
            future.cancel()
