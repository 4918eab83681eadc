"""The worker's watchdog thread: it notices a stalled event loop, and renews the worker's
leases from a store of its own, so one handler that blocks the loop (``time.sleep`` in an
``async def``) does not cost the other tasks their leases.

**Stalls.** The worker's loop beats every quarter of ``threshold`` (one timer, nothing per
task). When the thread sees no beat for ``threshold`` seconds it logs, once per stall, what
the loop is running — the claimed task (id, queue, attempt, handler) if it is a handler,
with the loop thread's stack — and counts it (``rdq_loop_stalls_total``). When the loop beats
again it logs how long the stall lasted (``rdq_loop_stall_seconds``), and the other handlers
get the stalled time added to their timeouts: a handler is not timed out for time another one
took from it. (Stalls shorter than ``threshold`` are neither reported nor excused.)

**Leases.** When the worker's store can open a second store on the same data
(``Storage.reopen()``, capability ``reopen``), the thread opens one on its own event loop,
checks once that it reaches the same tasks (a ``get`` of the first task the worker claims),
and from then on renews every lease the worker holds
when a third of it has passed, whatever the worker's loop is doing. A loop stalled for longer
than ``stall_limit`` means a hung worker: renewals stop then, so its leases lapse and other
workers take its tasks over. Until the second store is ready, or when there is none, the
worker's own loop renews the leases (:func:`rdq.worker._heartbeat.heartbeat_loop`); so the
worker claims its first tasks only once the thread has opened that store or given up on it
(:meth:`Watchdog.store_opened`, at most :data:`OPEN_WAIT` seconds): a handler that blocks the
loop from the moment its task is claimed would otherwise keep every lease of the worker from
being renewed until the store is open, and a lease shorter than that lapses.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from rdq import metrics
from rdq.errors import NotFound
from rdq.spi import Storage
from rdq.worker._clock import StorageClock
from rdq.worker._heartbeat import MAX_TICK, LostLease, due_for_renewal, renew
from rdq.worker._run import Run

__all__ = ["STACK_DEPTH", "Watchdog"]

STACK_DEPTH = 40
"""Innermost frames of the loop thread's stack logged for a stall."""

RENEWALS_AT_ONCE = 2
"""Lease renewals the thread has in flight at once. It bounds the connections of the thread's
store (docs/sizing.md counts them: two); each renewal is one short statement, so two in
flight renew about a thousand leases a second at a 2 ms round trip."""

JOIN_TIMEOUT = 10.0

OPEN_WAIT = 10.0
"""How long a starting worker waits for its lease thread's store before it claims anyway
(the loop then renews the leases until the store is open)."""


class Watchdog:
    """Watches one worker's event loop and, given ``lease_store``, renews its leases."""

    def __init__(
        self,
        *,
        runs: Callable[[], list[Run]],
        clock: StorageClock,
        worker_id: str,
        log: Any,
        threshold: float,
        stall_limit: float,
        lease_store: Storage | None,
        lost: LostLease,
    ) -> None:
        """``runs()`` lists the runs the worker holds (called from either thread); ``lost``
        is called on the worker's loop for a run whose renewal was refused."""
        self._runs = runs
        self._clock = clock
        self._worker_id = worker_id
        self._log = log
        self._threshold = threshold
        self._interval = threshold / 4.0
        self._stall_limit = stall_limit
        self._store = lease_store
        self._lost = lost
        self.renewing = False
        """True once the thread renews the worker's leases (the loop then does not)."""
        self._last_beat = time.monotonic()
        self._stall_since: float | None = None
        self._longest_seen = 0.0
        self._stalled_queue = ""
        self._gave_up = False
        self._stopping = threading.Event()
        self._opened = threading.Event()
        """Set once the thread has opened its store, or found it has none it can use."""
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._timer: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None

    # --- on the worker's loop ------------------------------------------------------------

    def start(self) -> None:
        """Start beating on the running loop and start the thread."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._beat()
        self._thread_loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="rdq-watchdog", daemon=True)
        self._thread.start()

    async def store_opened(self, timeout: float = OPEN_WAIT) -> None:
        """Wait until the thread has opened its store or given up on it, at most ``timeout``
        seconds (the worker's first claim waits for it, see the module's docstring)."""
        if not self._opened.is_set():
            await asyncio.get_running_loop().run_in_executor(None, self._opened.wait, timeout)

    async def stop(self) -> None:
        """Stop the thread (closing its store) and the beat."""
        self._stopping.set()
        if self._timer is not None:
            self._timer.cancel()
        self.renewing = False
        if self._thread_loop is not None:
            with contextlib.suppress(RuntimeError):  # its loop is already closed
                self._thread_loop.call_soon_threadsafe(self._wake.set)
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, JOIN_TIMEOUT)

    def _beat(self) -> None:
        self._last_beat = time.monotonic()
        loop = self._loop
        if loop is not None and not self._stopping.is_set():
            self._timer = loop.call_later(self._interval, self._beat)

    def _tell_lost(self, run: Run, exc: Exception) -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the worker's loop is closed: it is over
                self._loop.call_soon_threadsafe(self._lost, run, exc)

    # --- on the thread -------------------------------------------------------------------

    def _main(self) -> None:
        loop = self._thread_loop
        if loop is None:
            self._opened.set()
            return
        try:
            loop.run_until_complete(self._watch())
        except Exception:
            self._log.exception("the watchdog thread failed", worker_id=self._worker_id)
        finally:
            self.renewing = False
            self._opened.set()
            loop.close()

    async def _watch(self) -> None:
        store = await self._connect()
        self._opened.set()
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                self._check_stall(now - self._last_beat)
                tick = self._interval
                if store is not None:
                    store, tick = await self._keep_leases(store, now, tick)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), tick)
        finally:
            self.renewing = False
            if store is not None:
                await store.aclose()

    async def _connect(self) -> Storage | None:
        store = self._store
        if store is None:
            return None
        try:
            await store.connect()
        except Exception as exc:
            self._log.warning(
                "could not open the lease thread's store; leases are renewed on the event loop",
                worker_id=self._worker_id,
                error=str(exc),
            )
            return None
        return store

    async def _keep_leases(
        self, store: Storage, now: float, tick: float
    ) -> tuple[Storage | None, float]:
        """Renew what is due; returns the store (``None`` once it proved useless) and the
        time to the next look."""
        stalled = now - self._last_beat
        if stalled >= self._stall_limit:
            if not self._gave_up:
                self._gave_up = True
                self._log.error(
                    "event loop stalled past the stall limit; no longer renewing leases, "
                    "so other workers can take the tasks over",
                    worker_id=self._worker_id,
                    stalled_for=round(stalled, 3),
                    stall_limit=self._stall_limit,
                )
            return store, tick
        self._gave_up = False
        runs = self._runs()
        if not self.renewing:
            if not runs:
                return store, tick
            if not await self._reaches_same_tasks(store, runs[0]):
                await store.aclose()
                return None, tick
            self.renewing = True
        due, tick = due_for_renewal(runs, now, min(tick, MAX_TICK))
        if due:
            limit = asyncio.Semaphore(RENEWALS_AT_ONCE)
            clock, worker_id, log, lost = self._clock, self._worker_id, self._log, self._tell_lost

            async def renew_one(run: Run) -> None:
                async with limit:
                    await renew(store, clock, run, worker_id, log, lost)

            await asyncio.gather(*(renew_one(run) for run in due))
        return store, tick

    async def _reaches_same_tasks(self, store: Storage, run: Run) -> bool:
        """True if ``store`` sees a task the worker holds (so its renewals mean something)."""
        try:
            await store.get(run.claimed.task.id)
        except NotFound:
            self._log.info(
                "the reopened store does not reach the worker's tasks; "
                "leases are renewed on the event loop",
                worker_id=self._worker_id,
            )
            return False
        except Exception:
            return True  # an outage: the renewals will report it; the URL is the same
        return True

    def _check_stall(self, stalled: float) -> None:
        if stalled > self._threshold:
            self._longest_seen = max(self._longest_seen, stalled)
            if self._stall_since is None:
                self._stall_since = self._last_beat
                self._report_stall(stalled)
            return
        if self._stall_since is not None:
            lasted = max(self._longest_seen, self._last_beat - self._stall_since - self._interval)
            metrics.LOOP_STALL_SECONDS.observe(lasted)
            self._log.warning(
                "event loop running again after a stall",
                worker_id=self._worker_id,
                queue=self._stalled_queue or None,
                stalled_for=round(lasted, 3),
            )
            self._stall_since = None
            self._longest_seen = 0.0
            self._stalled_queue = ""

    def _report_stall(self, stalled: float) -> None:
        loop = self._loop
        current = asyncio.current_task(loop) if loop is not None else None
        run = next((r for r in self._runs() if r.task is current), None) if current else None
        frame = sys._current_frames().get(self._loop_thread)
        stack = "".join(traceback.format_stack(frame, limit=STACK_DEPTH)) if frame else ""
        fields: dict[str, Any] = {
            "worker_id": self._worker_id,
            "stalled_for": round(stalled, 3),
            "threshold": self._threshold,
            "stack": stack,
        }
        if run is not None:
            task = run.claimed.task
            self._stalled_queue = run.queue
            fields.update(
                task_id=task.id,
                queue=run.queue,
                attempt=task.attempt_count + 1,
                handler=task.handler_ref,
            )
            message = "event loop stalled by a handler (blocking code in an async handler?)"
        else:
            fields["running"] = current.get_name() if current is not None else None
            message = "event loop stalled"
        metrics.LOOP_STALLS.labels(self._stalled_queue).inc()
        self._log.warning(message, **fields)
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the worker's loop is closed
                loop.call_soon_threadsafe(self._excuse_stall, run, self._last_beat)

    def _excuse_stall(self, culprit: Run | None, since: float) -> None:
        """On the worker's loop, first thing once it runs again (callbacks handed over while
        it was stalled run before the timers that expired meanwhile): every handler but the
        one that stalled the loop gets the stalled time added to its timeout, so it is not
        timed out for time it could not use."""
        stalled = time.monotonic() - since
        for run in self._runs():
            if run is not culprit and not run.done:
                run.excuse_stall(stalled)
