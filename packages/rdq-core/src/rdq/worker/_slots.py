"""One queue's handler slots in a worker, and the tasks claimed ahead for them.

A worker runs at most ``concurrency`` handlers of a queue at once. It claims as many tasks as
it has free slots and, while the queue is deep and its handlers are quick, some more *ahead*:
they wait here, leases renewed like any held task, and start as slots free, so the next
claim's round trip overlaps the handlers instead of following them, and every claim and
batched completion carries more tasks. How far ahead adapts:

- a claim that came back full (the queue had more) doubles the target, from ``concurrency``
  up to :data:`MAX_AHEAD`, and never beyond what the queue's handlers get through in
  :data:`AHEAD_SECONDS` at their recent pace (slots freed per second), so no task waits here
  much longer than that (long handlers: nothing is claimed ahead);
- a claim that came back short (the queue is drained) drops it to nothing;
- under a concurrency limit across the fleet (``limit``, the queue's smallest) a worker
  claims ahead only while its slots and what it keeps ahead stay within
  1/:data:`LIMIT_SHARE` of the limit: a task claimed ahead holds a slot of the limit while
  it waits here, a slot another worker could run a task in. Under ``Concurrency(20)`` no
  worker of concurrency 10 claims ahead (one that did kept 9 of the 20 slots waiting behind
  its own handlers, and the fleet ran 11).

A claim goes out when nothing is held, or once half of what a claim may ask for is free, or
when slots are free but none has been freed for ``poll_min`` (long handlers do not leave a
slot idle for long). Waiting for that is one future per claim, woken by the slot that makes it
true: nothing is done per task beyond counting.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import time
from collections.abc import Callable

from rdq import metrics
from rdq.spi import bounds
from rdq.worker._clock import Monotonic
from rdq.worker._run import Run

__all__ = ["AHEAD_SECONDS", "LIMIT_SHARE", "MAX_AHEAD", "Held", "QueueSlots"]

AHEAD_SECONDS = 0.05
"""Tasks are claimed ahead for at most this long of the queue's recent pace."""

MAX_AHEAD = 200
"""Tasks claimed ahead of free slots, per queue, at most."""

LIMIT_SHARE = 8
"""Under a concurrency limit ``L``, a worker's slots and the tasks it claims ahead stay within
``L // LIMIT_SHARE`` (``Concurrency(1000)`` and concurrency 10: up to 115 ahead)."""

_RATE_WINDOW = 0.005
"""Slots freed are counted over at least this many seconds before the pace (how fast the
queue's handlers get through tasks) is re-estimated."""

in_flight: collections.Counter[str] = collections.Counter()
"""Handlers running in this process, by queue. ``rdq_worker_in_flight`` reads it when
scraped, so running a task costs no metric update."""


def _watch_in_flight(queue: str) -> None:
    metrics.WORKER_IN_FLIGHT.labels(queue).set_function(
        functools.partial(in_flight.__getitem__, queue)
    )


class Held:
    """What one worker holds over all its queues: every run by task id, and how many
    successes waiting for their batched write have given their slot back already (at most
    ``max_freed_early``, the worker's ``max_unrecorded``: what a crash could leave run but
    unrecorded, besides the slots)."""

    __slots__ = ("freed_early", "max_freed_early", "runs")

    def __init__(self) -> None:
        self.runs: dict[str, Run] = {}
        self.freed_early = 0
        self.max_freed_early = 0


class QueueSlots:
    """The slots of one queue in one worker (the ``Holder`` of its runs)."""

    __slots__ = (
        "_freed",
        "_freed_at",
        "_mark",
        "_rate",
        "_recorded",
        "_start",
        "_unbounded",
        "_waiter",
        "_wants",
        "_woken",
        "active",
        "ahead",
        "concurrency",
        "held",
        "limit",
        "mono",
        "name",
        "next_due",
        "settled",
        "target",
        "unrecorded",
    )

    def __init__(
        self,
        name: str,
        concurrency: int,
        held: Held,
        start: Callable[[Run], None],
        mono: Monotonic = time.monotonic,
    ) -> None:
        """``start(run)`` starts a run's handler (the slot is already taken for it);
        ``mono`` is the worker's monotonic clock."""
        self.mono = mono
        self.name = name
        self.concurrency = concurrency
        self.held = held
        self._start = start
        self.active = 0
        """Slots taken: handlers running, or outcomes being written that kept their slot."""
        self.ahead: collections.deque[Run] = collections.deque()
        """Claimed runs waiting for a slot, in claim order."""
        self.target = 0
        """How many runs to keep claimed ahead of free slots."""
        self.next_due = float("inf")
        """Monotonic time of the earliest retry this worker scheduled (a hint to wake up)."""
        self.limit: int | None = None
        """The queue's smallest concurrency limit across the fleet (``None``: none)."""
        self.unrecorded = 0
        """Successes of this queue whose slot was freed before their batched write was
        recorded: the store still counts them against the queue's limits."""
        self.settled = 0
        """Runs of this queue whose outcome is written (or given up): each one's slots of the
        queue's limits are free in the store since."""
        self._freed = 0
        self._mark = (mono(), 0)
        self._rate = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._unbounded = False
        self._wants = 0
        self._woken = False
        self._recorded = False
        self._freed_at = 0.0
        _watch_in_flight(name)

    # --- claiming ------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """True while any run of this queue is held (running or claimed ahead)."""
        return bool(self.active or self.ahead)

    def claim_size(self) -> int:
        """How many tasks a claim would ask for now."""
        return max(0, self.concurrency - self.active + self.target - len(self.ahead))

    def worth_claiming(self) -> int:
        """The claim size at which a claim is worth its round trip while runs are held."""
        return max(1, (self.concurrency + self.target) // 2)

    def claimed(self, runs: list[Run], asked: int) -> None:
        """Take the runs of a claim that asked for ``asked``: start what free slots allow,
        keep the rest ahead; adapt how far ahead to claim."""
        held = self.held.runs
        for run in runs:
            run.holder = self
            held[run.claimed.task.id] = run
            if self.active < self.concurrency and not self.ahead:
                self._take_slot(run)
            else:
                self.ahead.append(run)
        self._adapt(asked, len(runs))

    def _adapt(self, asked: int, got: int) -> None:
        now = self.mono()
        since, freed = self._mark
        if now - since >= _RATE_WINDOW:
            pace = (self._freed - freed) / (now - since)
            self._rate = pace if not self._rate else (self._rate + pace) / 2.0
            self._mark = (now, self._freed)
        if got < asked:
            self.target = 0
            return
        cap = min(MAX_AHEAD, bounds.MAX_LIMIT - self.concurrency, int(self._rate * AHEAD_SECONDS))
        if self.limit is not None:
            cap = min(cap, max(0, self.limit // LIMIT_SHARE - self.concurrency))
        self.target = max(0, min(cap, max(self.concurrency, 2 * self.target)))

    async def wait(
        self, wants: int, quiet: float, *, recorded: bool = False, settled: int | None = None
    ) -> None:
        """Wait until a claim would ask for at least ``wants`` tasks, or a slot has stood
        free for ``quiet`` seconds with none freed meanwhile, or :meth:`wake`. While every
        slot is taken, only a slot freed can end the wait (or a wake). With ``recorded`` (a
        claim came back short under the queue's limits), a slot freed before its success is
        recorded does not end it, and the record does: the store frees the task's slots of
        the limits only then, and a claim sent before would find them still taken. ``settled``
        is :attr:`settled` when that claim was sent: a run settled since (while the claim
        was out) ends the wait at once."""
        if recorded and settled is not None and settled != self.settled:
            return
        loop = asyncio.get_running_loop()
        timeout: float | None = quiet if self.active < self.concurrency else None
        while True:
            waiter = self._waiter = loop.create_future()
            self._wants = wants
            self._unbounded = timeout is None
            self._recorded = recorded
            timer = None if timeout is None else loop.call_later(timeout, _settle, waiter)
            try:
                await waiter
            finally:
                self._waiter = None
                self._recorded = False
                if timer is not None:
                    timer.cancel()
            if self._woken or self.claim_size() >= wants:
                self._woken = False
                return
            if self.active >= self.concurrency:
                timeout = None  # every slot taken again
                continue
            since = self.mono() - self._freed_at  # a slot freed meanwhile: wait on
            if since >= quiet:
                return
            timeout = quiet - since

    def wake(self) -> None:
        """End a :meth:`wait` now (stop, or a retry that came due)."""
        if self._waiter is not None:
            self._woken = True
            _settle(self._waiter)

    # --- runs (the Holder protocol) ------------------------------------------------------

    def _take_slot(self, run: Run) -> None:
        self.active += 1
        in_flight[self.name] += 1
        run.holds_slot = True
        self._start(run)

    def _give_slot_back(self, run: Run, early: bool = False) -> None:
        run.holds_slot = False
        self.active -= 1
        in_flight[self.name] -= 1
        self._freed += 1
        self._freed_at = self.mono()
        ahead = self.ahead
        while ahead and self.active < self.concurrency:
            following = ahead.popleft()
            if following.done:
                continue
            self._take_slot(following)
        if early and self._recorded:
            return  # the store holds the task's slots until its success is recorded
        if self._waiter is not None and (
            self.claim_size() >= self._wants or (self._unbounded and self.active < self.concurrency)
        ):  # enough to claim, or the first free slot of a wait that had none
            _settle(self._waiter)

    def release(self, run: Run) -> None:
        if self.held.runs.get(run.claimed.task.id) is run:
            del self.held.runs[run.claimed.task.id]
        self.settled += 1
        if run.holds_slot:
            self._give_slot_back(run)
        elif run.freed_early:
            run.freed_early = False
            self.held.freed_early -= 1
            self.unrecorded -= 1
            if self._recorded:
                self.wake()

    def offer_slot(self, run: Run) -> None:
        held = self.held
        if held.freed_early < held.max_freed_early:
            run.freed_early = True
            held.freed_early += 1
            self.unrecorded += 1
            self._give_slot_back(run, early=True)

    def unstarted(self) -> list[Run]:
        """Take the runs still waiting for a slot (the worker is stopping for good)."""
        runs = [run for run in self.ahead if not run.done]
        self.ahead.clear()
        return runs


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
