"""The claim loop of a worker: one per queue, asking for as many tasks as the queue has free
slots (see :mod:`rdq.worker._slots`), waiting with ``wait_due`` or a backoff when nothing is due,
for a slot or a refill when a limit holds its tasks back, and retrying an unreachable store with
a short, capped backoff. :class:`ClaimLoops` is the part of :class:`~rdq.worker.Worker` that
claims; the worker runs what it claims."""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta
from typing import Any

from rdq import metrics
from rdq.app import App
from rdq.spi import Doubling, Storage, bounds
from rdq.worker._clock import StorageClock
from rdq.worker._flow import FlowControl
from rdq.worker._run import Run
from rdq.worker._runner import Runner
from rdq.worker._slots import QueueSlots
from rdq.worker._trim import MemoryTrim

__all__ = [
    "DUE_WITHIN",
    "OUTAGE_RETRY_CAP",
    "OUTAGE_RETRY_FIRST",
    "WOKEN_EMPTY_LIMIT",
    "ClaimLoops",
]

DUE_WITHIN = 0.001
"""A retry of this worker's own that is due within this many seconds counts as due, and the
loop waits for the store's word instead. A shorter wait would buy nothing but a round trip,
and one shorter than the event loop's clock can tick (what is left of a delay computed on
the store's clock) would end at once without the clock moving: the loop would claim again
and again at the same instant."""

WOKEN_EMPTY_LIMIT = 2
"""A store that says tasks are due but gives none to claim (they are held back by a
control) this many times in a row is polled with the idle backoff instead, until a claim
gets a task again."""

OUTAGE_RETRY_FIRST = 0.1
OUTAGE_RETRY_CAP = 0.5
"""Seconds between claims while the store is unreachable: doubling from the first to the cap,
each drawn with jitter within ±50 %, so a worker finds a store that came back within 0.75 s
(``python -m bench.recovery``). A refused claim costs the store a refused connection, so two a
second per queue and worker is cheap; a longer cap would be paid in latency after every
outage."""


class ClaimLoops:
    """The claiming half of a worker (its attributes are set by the worker's ``__init__``)."""

    app: App
    storage: Storage
    worker_id: str
    poll_min: float
    poll_max: float
    clock: StorageClock
    log: Any
    _rng: random.Random | None
    _runs: dict[str, Run]
    _trim: MemoryTrim
    _idle_waits: set[asyncio.Future[Any]]
    _stopping: asyncio.Event | None
    _flow: FlowControl | None

    async def _claim_loop(
        self, state: QueueSlots, runner: Runner, notify: bool, stopping: asyncio.Event
    ) -> None:
        """Claim for one queue until stop; a bug in one round is logged, never fatal."""
        while not stopping.is_set():
            try:
                await self._claim_rounds(state, notify, stopping)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception(
                    "claim loop failed; restarting it", worker_id=self.worker_id, queue=state.name
                )
                await self._idle_wait(asyncio.sleep(1.0))

    async def _claim_rounds(self, state: QueueSlots, notify: bool, stopping: asyncio.Event) -> None:
        queue = state.name
        claims_counter = metrics.CLAIMS.labels(queue)
        # claims name this worker where the store keeps a claim's holder (a store written for
        # contract version 1 takes no worker_id)
        holder = {"worker_id": self.worker_id} if self.storage.capabilities().claim_holder else {}
        idle = Doubling(self.poll_min, self.poll_max, jitter=0)
        outage = Doubling(OUTAGE_RETRY_FIRST, OUTAGE_RETRY_CAP, rng=self._rng)
        woken_empty = 0
        while not stopping.is_set():
            config = self.app.queue_config(queue)
            state.concurrency = config.concurrency
            state.limit = self.app.limit_plan(queue).least_concurrency
            size = state.claim_size()
            if state.busy:
                wants = state.worth_claiming()
                if size < wants:
                    # wait for a bigger batch, but not with an idle slot for long
                    await state.wait(wants, self.poll_min)
                    size = state.claim_size()
                    if size <= 0 or stopping.is_set():
                        continue
            asked = min(size, bounds.MAX_LIMIT)
            lease = timedelta(seconds=config.lease)
            sent = self.clock.mono()
            settled = state.settled
            try:
                claims = await self.storage.claim_due(queue, asked, lease, **holder)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                metrics.STORAGE_ERRORS.labels("claim_due").inc()
                pause = outage.next()
                self.log.warning(
                    "claiming failed; backing off",
                    worker_id=self.worker_id,
                    queue=queue,
                    error=str(exc),
                    error_type=type(exc).__name__,
                    retry_in=round(pause, 2),
                )
                await self._idle_wait(asyncio.sleep(pause))
                continue
            outage.reset()
            if claims:
                received = self.clock.mono()
                self.clock.observe_claim(claims[0].task.lease_expires_at, lease, sent, received)
                claims_counter.inc(len(claims))
                self._trim.worked()
                claims_got = len(claims)
                state.claimed([Run(claimed, config.lease, sent) for claimed in claims], asked)
                claims = []  # the runs hold the tasks now: not this loop while it waits
                idle.reset()
                woken_empty = 0
                # let the runs just started reach their handlers before the next claim is sent
                # (sending it first would hold every handler back by its round trip's CPU)
                await asyncio.sleep(0)
                if claims_got < asked:
                    # short under limits: they let no more through now, so the next claim
                    # waits for a slot this worker frees (or the idle poll), as after none
                    await self._wait_for_limits(state, idle.next(), settled)
                continue
            state.claimed([], asked)
            if stopping.is_set():
                break  # stopped while the claim was out: no wait before the stop is seen
            if not self._runs:
                self._trim.idle()  # give memory freed by the work back (glibc)
            now = self.clock.mono()
            if state.next_due <= now + DUE_WITHIN:
                state.next_due = float("inf")
            until_retry = max(0.0, state.next_due - now)
            if await self._wait_for_limits(state, min(idle.next(), until_retry), settled):
                continue
            if notify and woken_empty < WOKEN_EMPTY_LIMIT:
                woke = await self._idle_wait(
                    self.storage.wait_due(queue, min(self.poll_max, until_retry))
                )
                # due, but nothing claimable: its tasks are held back (a pause, an open
                # breaker, a limit); waiting for "due" again would spin, so poll for a while
                quick = self.clock.mono() - now < self.poll_min
                woken_empty = woken_empty + 1 if woke is True and quick else 0
            else:
                await self._idle_wait(asyncio.sleep(min(idle.next(), until_retry)))
                woken_empty = 0

    async def _wait_for_limits(self, state: QueueSlots, pause: float, settled: int) -> bool:
        """After a claim that came back empty or short from a queue with limits: wait until one of
        this worker's own tasks of the queue ends or its success is recorded (either frees
        in the store the slots of the limits its task held: a success's local slot is freed
        before its batched write, and the claim sent then found the store's still taken) or,
        for a rate limit, until its bucket has refilled — each at most ``pause``. False when
        the queue has no limits (wait as for an empty queue). ``settled``: the state's
        count of settled runs when the claim was sent (one settled since: no wait)."""
        limits = self._flow.limits if self._flow is not None else None
        if limits is None or not limits.limited(state.name):
            return False
        pause = min(pause, limits.refill_time(state.name))
        if state.busy or state.unrecorded:
            await state.wait(state.claim_size() + 1, pause, recorded=True, settled=settled)
            return True
        if pause == float("inf"):
            return False
        await self._idle_wait(asyncio.sleep(pause))
        return True

    async def _idle_wait(self, awaitable: Any) -> Any:
        """Await ``awaitable`` unless stop() interrupts it and return its result (``None``
        when interrupted or failed); swallow its errors (an outage during wait_due is retried
        by the next claim). Once stop() was called it returns at once: stop() interrupts the
        waits under way, and a wait begun after it would hold the worker's exit back."""
        if self._stopping is not None and self._stopping.is_set():
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            return None
        waiter = asyncio.ensure_future(awaitable)
        self._idle_waits.add(waiter)
        try:
            await asyncio.wait([waiter])
        finally:
            self._idle_waits.discard(waiter)
            if not waiter.done():
                waiter.cancel()
        if waiter.cancelled():
            return None
        if waiter.exception() is not None:
            metrics.STORAGE_ERRORS.labels("wait_due").inc()
            await asyncio.sleep(self.poll_min)
            return None
        return waiter.result()
