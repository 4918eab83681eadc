"""The state of one claimed task while a worker holds it, and what holds on to it (a slot's
:class:`Holder`, a deadline's :class:`Watch`): the leaf every worker module shares.

It imports no other worker module but the type of a thread pool's call (:mod:`._threads`, a
leaf itself), so the runner, the deadlines, the heartbeat, the slots and the shutdown all
import :class:`Run` without import circles."""

from __future__ import annotations

import asyncio
import math
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from rdq.app import TaskContext
from rdq.config import QueueConfig
from rdq.spi import Attempt, Claimed, Doubling

if TYPE_CHECKING:
    from rdq.worker._threads import Call

__all__ = ["Holder", "Run", "Watch"]


class Run:
    """One claimed task while this worker holds it (claimed ahead, running, or having its
    outcome written)."""

    __slots__ = (
        "attempt",
        "call",
        "claimed",
        "config",
        "ctx_fields",
        "deadline",
        "done",
        "expired",
        "fenced",
        "finished",
        "freed_early",
        "holder",
        "holds_slot",
        "interrupted",
        "lease",
        "lost",
        "number",
        "queue",
        "renew_at",
        "resolving",
        "started",
        "task",
        "timing",
        "used",
        "where",
        "write_backoff",
        "write_deadline",
        "writing",
    )

    def __init__(self, claimed: Claimed, lease: float, claimed_mono: float) -> None:
        self.claimed = claimed
        self.queue = claimed.task.queue
        self.lease = lease
        self.renew_at = claimed_mono + lease / 3.0
        self.task: asyncio.Task[None] | None = None
        self.call: Call | None = None
        self.lost = False
        """The lease was lost (heartbeat refused): the outcome must not be written."""
        self.interrupted = False
        """The worker is shutting down and gave up waiting for this task."""
        self.done = False
        self.fenced = False
        """The handler ignored its timeout's cancellation; TIMEOUT was recorded without it."""
        self.resolving = False
        """The handler is over and its outcome is being written (shutdown lets that finish)."""
        self.writing = False
        """The success is with the completer, waiting for its batched write."""
        self.deadline = math.inf
        """Monotonic time by which an awaited handler must have ended (timeout included)."""
        self.timing: Watch | None = None
        """The deadline's entry while it is watched (the handler runs)."""
        self.expired = False
        """The deadline passed and the handler's task was cancelled for it."""
        self.where: str | None = None
        """Where a plain function's thread was when its timeout ran out."""
        self.holder: Holder | None = None
        """Where the task's slot is accounted: told when the run is over."""
        self.holds_slot = False
        self.freed_early = False
        self.config: QueueConfig | None = None
        self.number = 0
        self.used = 0
        self.started: datetime | None = None
        self.finished: datetime | None = None
        """When the handler's call ended (estimated store time): its attempt's ``finished_at``,
        and the time its breaker counts the outcome at."""
        self.attempt: Attempt | None = None
        self.write_deadline = 0.0
        self.write_backoff: Doubling | None = None
        self.ctx_fields: tuple[str, int] | None = None
        """(worker id, attempt number) for a context built on demand."""

    def excuse_stall(self, seconds: float) -> None:
        """Give the handler ``seconds`` more: the event loop was stalled by another handler
        for that long, time this one could not use."""
        self.deadline += seconds

    def expire(self) -> None:
        """The handler's timeout ran out: cancel its task (the call ends as TIMEOUT)."""
        if self.task is not None and not self.task.done():
            self.expired = True
            self.task.cancel()

    def context(self) -> TaskContext:
        """The handler's view of the task (built when a handler asks for it)."""
        task = self.claimed.task
        worker_id, number = self.ctx_fields or ("", task.attempt_count + 1)
        return TaskContext(
            task.id,
            task.queue,
            number,
            task.headers,
            task.handler_ref,
            task.redrive_count,
            worker_id,
            task,
        )

    def release(self) -> None:
        """The run is over: the worker no longer holds the task."""
        if self.done:
            return
        self.done = True
        if self.holder is not None:
            self.holder.release(self)

    def offer_slot(self) -> None:
        """The handler is over and the success waits for its batched write: the worker may
        give the slot to the next task."""
        if self.holder is not None and self.holds_slot:
            self.holder.offer_slot(self)


class Holder(Protocol):
    """Accounts a worker's runs and their concurrency slots."""

    def release(self, run: Run) -> None: ...

    def offer_slot(self, run: Run) -> None: ...


class Watch:
    """A heap entry's hold on a run: ``run`` is None once the handler ended."""

    __slots__ = ("run",)

    def __init__(self, run: Run) -> None:
        self.run: Run | None = run
