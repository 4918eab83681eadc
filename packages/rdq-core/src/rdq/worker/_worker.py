"""The worker: claims due tasks in batches, runs them with bounded concurrency, and shuts down
gracefully.

One claim loop per queue asks for as many tasks as it has free slots — plus, while the queue
is deep and its handlers quick, some to start as slots free (see :mod:`rdq.worker._slots`): at once
when it holds nothing, else once half of that is free (so claims come in batches) or when a
free slot has waited ``poll_min`` (so long handlers do not leave slots idle). When nothing is
due it waits with ``wait_due`` if the store can notify, else polls with a backoff from
``poll_min`` to ``poll_max`` that resets as soon as work appears. Storage outages are logged,
counted and retried with backoff; the worker never dies of one. Where the store has
``batch_complete``, successes are recorded through one :class:`~rdq.worker._completer.Completer`
per worker (many tasks per ``complete_many`` call, no timer), and a success waiting for its
batch gives its concurrency slot to the next task at once, as long as fewer than
``max_unrecorded`` (default: :data:`DEFAULT_MAX_UNRECORDED`, or the worker's total concurrency
if larger) are in that state (so the next claim overlaps the write; a crash can then leave up
to that many finished tasks unrecorded, besides those holding a slot, to be run again after
their lease).
Their leases are still renewed until the write returns.

``stop()`` (or SIGTERM/SIGINT once :meth:`Worker.install_signal_handlers` ran) stops claiming,
gives in-flight handlers ``grace_period`` seconds (tasks claimed ahead keep starting as slots
free), then records INTERRUPTED for the rest — started or not — and makes them due again at
once. A second signal skips the grace period. Outcomes already being
written (a completion waiting for its batch included) are left to finish either way.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import signal
import socket
import time
from collections.abc import Sequence
from typing import Any, Literal

from rdq import metrics, tracing
from rdq.app import App
from rdq.client import Client
from rdq.errors import ConfigError
from rdq.keys import Keyring
from rdq.logging import get_logger
from rdq.spi import Storage, bounds
from rdq.worker._claiming import OUTAGE_RETRY_CAP, OUTAGE_RETRY_FIRST, ClaimLoops
from rdq.worker._clock import Monotonic, StorageClock
from rdq.worker._completer import MAX_FLUSHES, Completer
from rdq.worker._fleet import Fleet, served
from rdq.worker._flow import FlowControl
from rdq.worker._heartbeat import heartbeat_loop
from rdq.worker._maintenance import maintenance_loop
from rdq.worker._order import DeclaredOrder
from rdq.worker._preflight import check_discards, check_storage, warn_unserved
from rdq.worker._run import Run
from rdq.worker._runner import Runner
from rdq.worker._scheduler import schedule_loop
from rdq.worker._shutdown import INTERRUPT_WAIT, drain
from rdq.worker._slots import Held, QueueSlots
from rdq.worker._threads import HandlerThreads
from rdq.worker._trim import MemoryTrim
from rdq.worker._watchdog import Watchdog

__all__ = [
    "DEFAULT_MAX_UNRECORDED",
    "MAX_UNRECORDED",
    "OUTAGE_RETRY_CAP",
    "OUTAGE_RETRY_FIRST",
    "Worker",
    "default_worker_id",
]

MAX_UNRECORDED = 10_000
"""The largest ``max_unrecorded`` a worker takes."""
DEFAULT_MAX_UNRECORDED = 100
"""``max_unrecorded`` when none is given (or the worker's total concurrency, if larger): about
what a quick drain finishes during one batched write (PostgreSQL, 2 vCPU: ~11,000 tasks/s by
~5 ms), so the bound seldom holds a slot back; a smaller one made every write carry only
``concurrency`` tasks (BENCHMARKS.md, "3 Dec: the default completion bound")."""


def default_worker_id() -> str:
    """``host:pid:random`` — unique per process (and per Worker object)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker(ClaimLoops):
    """Runs the tasks of an :class:`rdq.App`'s queues from ``storage``."""

    def __init__(
        self,
        app: App,
        storage: Storage,
        *,
        queues: Sequence[str] | None = None,
        worker_id: str | None = None,
        grace_period: float = 30.0,
        poll_min: float = 0.05,
        poll_max: float = 2.0,
        maintenance: bool = True,
        stats_interval: float = 15.0,
        purge_interval: float = 60.0,
        rng: random.Random | None = None,
        logger: Any = None,
        stall_threshold: float = 1.0,
        stall_limit: float = 60.0,
        lease_thread: bool = True,
        clock: Monotonic | None = None,
        max_unrecorded: int | None = None,
        keys: Keyring | Literal["env"] | None = "env",
    ) -> None:
        """``queues`` defaults to ``app.queues`` (declared queues and those of registered
        handlers), or ``["default"]`` if there are none. ``logger`` replaces the structlog
        logger ``rdq.worker``.

        The watchdog thread logs and counts event-loop stalls longer than
        ``stall_threshold`` seconds and, with ``lease_thread`` and a store that can ``reopen``,
        renews leases from a store of its own until the loop has been stalled for
        ``stall_limit`` seconds (see :mod:`rdq.worker._watchdog`).

        ``clock`` replaces ``time.monotonic`` as the worker's clock for every wait, lease
        renewal, timeout and backoff it measures: a test runs the worker on an event loop whose
        time is simulated (``clock=loop.time``) and on a store whose clock follows it, and
        backoffs and leases then take no real time. With a clock of its own the worker renews
        leases on its event loop only (no lease thread: that thread runs on real time).

        ``max_unrecorded`` (a store with ``batch_complete``): how many successes waiting for
        their batched write may give their slot to the next task, at most (default:
        :data:`DEFAULT_MAX_UNRECORDED`, or the worker's total concurrency if larger). More
        lets each ``complete_many`` carry more tasks; the price is what a crash can leave run
        but unrecorded, to run again after their lease: at most ``max_unrecorded`` plus the
        worker's total concurrency (docs/engine.md).

        ``keys`` opens sealed payloads before their handler runs (see :mod:`rdq.keys`):
        ``"env"`` (the default) reads the keyring the environment configures
        (:meth:`rdq.keys.Keyring.from_env`), ``None`` holds none. A task whose key this worker
        lacks waits, uncharged, for one that holds it (:func:`rdq.retry.payload_unreadable`)."""
        self.keys = Keyring.from_env() if keys == "env" else keys
        self.app = app
        self.storage = storage
        names = list(queues) if queues is not None else (app.queues or ["default"])
        for name in names:
            bounds.check_queue(name)
        if not grace_period >= 0:
            raise ConfigError("must not be negative", key="grace_period")
        if not 0 < poll_min <= poll_max:
            raise ConfigError("need 0 < poll_min <= poll_max", key="poll_min")
        if not (stats_interval > 0 and purge_interval > 0):
            raise ConfigError("maintenance intervals must be positive", key="stats_interval")
        if not 0 < stall_threshold < stall_limit:
            raise ConfigError("need 0 < stall_threshold < stall_limit", key="stall_threshold")
        if max_unrecorded is not None and not (
            type(max_unrecorded) is int and 0 <= max_unrecorded <= MAX_UNRECORDED
        ):
            raise ConfigError(
                f"must be a whole number from 0 to {MAX_UNRECORDED}", key="max_unrecorded"
            )
        self.queues = list(dict.fromkeys(names))
        self.worker_id = worker_id or default_worker_id()
        self.grace_period = grace_period
        self.poll_min = poll_min
        self.poll_max = poll_max
        self.maintenance = maintenance
        self.stats_interval = stats_interval
        self.purge_interval = purge_interval
        self.stall_threshold = stall_threshold
        self.stall_limit = stall_limit
        self.lease_thread = lease_thread and clock is None
        self.max_unrecorded = max_unrecorded
        self.clock = StorageClock(clock or time.monotonic)
        self.log = logger if logger is not None else get_logger("rdq.worker")
        self._rng = rng
        self._held = Held()
        self._runs = self._held.runs
        self._trim = MemoryTrim(mono=self.clock.mono)
        self._states: dict[str, QueueSlots] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._hurry: asyncio.Event | None = None
        self._stop_requests = 0
        self._idle_waits: set[asyncio.Future[Any]] = set()
        self._side_tasks: set[asyncio.Task[None]] = set()
        """Fencing writes and abandon reports: awaited (briefly) before the worker stops."""
        self._flow: FlowControl | None = None

    # --- control -----------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """How many tasks this worker holds now (running, or having their outcome written)."""
        return len(self._runs)

    def stop(self) -> None:
        """Ask the worker to stop gracefully. Safe from any thread and from signal handlers;
        a second call skips the grace period."""
        loop = self._loop
        if loop is None:
            self._stop_requests += 1
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._request_stop()
        else:
            loop.call_soon_threadsafe(self._request_stop)

    def install_signal_handlers(self) -> None:
        """Make SIGTERM and SIGINT call :meth:`stop` (call from inside the running loop)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)

    def _request_stop(self) -> None:
        self._stop_requests += 1
        if self._stopping is not None:
            self._stopping.set()
        if self._stop_requests >= 2 and self._hurry is not None:
            self._hurry.set()
        for waiter in list(self._idle_waits):
            waiter.cancel()
        for state in self._states.values():
            state.wake()

    # --- main loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Work until :meth:`stop`; then drain in-flight tasks (see the module docstring)."""
        self._loop = asyncio.get_running_loop()
        stopping = self._stopping = asyncio.Event()
        self._hurry = asyncio.Event()
        if self._stop_requests:
            stopping.set()
        await check_storage(self.storage, self.queues[0])
        check_discards(self.app, self.storage, self.queues)
        tracing.preload()  # not at the first attempt
        warn_unserved(self.app, self.queues, self.log, self.worker_id)
        declared = DeclaredOrder(self.app, self.storage, self.queues, self.log)
        declared.check()
        size = sum(self.app.queue_config(q).concurrency for q in self.queues)
        threads = HandlerThreads(size)
        capabilities = self.storage.capabilities()
        flow = self._flow = FlowControl(
            self.app, self.storage, self.clock, self.queues, self.worker_id, self.log, self._rng
        )
        await _quietly(self.clock.calibrate(self.storage), self.log)
        await _quietly(flow.refresh(), self.log)  # breakers as they are before the first claim
        flow.declared = declared  # written before the first claim, or at a refresh after it
        await _quietly(declared.apply(), self.log)
        fleet = Fleet(
            self.storage,
            self.clock,
            self.worker_id,
            self.queues,
            size,
            lambda: len(self._runs),
            self.log,
            extra=served(self.app, self.queues),
        )
        await _quietly(fleet.heartbeat(), self.log)  # registered before its first claim
        leaving = asyncio.Event()
        bound = self.max_unrecorded
        self._held.max_freed_early = max(size, DEFAULT_MAX_UNRECORDED) if bound is None else bound
        runner = Runner(
            self.app,
            self.storage,
            self.clock,
            threads,
            self.worker_id,
            self.log,
            self._rng,
            on_retry=self._note_retry,
            spawn=self._side_task,
            flow=flow,
            fleet=fleet,
            keys=self.keys,
        )
        completer: Completer[Run] | None = None
        if capabilities.batch_complete:
            flushes = MAX_FLUSHES if capabilities.overlapping_completions else 1
            completer = runner.completer = Completer(
                self.storage, runner.recorded, max_flushes=flushes
            )
        loop = asyncio.get_running_loop()

        def start(run: Run) -> None:
            run.task = loop.create_task(runner.execute(run))

        self._states = {
            q: QueueSlots(
                q, self.app.queue_config(q).concurrency, self._held, start, self.clock.mono
            )
            for q in self.queues
        }
        notify = capabilities.notify
        watchdog = Watchdog(
            runs=self._held_runs,
            clock=self.clock,
            worker_id=self.worker_id,
            log=self.log,
            threshold=self.stall_threshold,
            stall_limit=self.stall_limit,
            lease_store=(
                self.storage.reopen() if self.lease_thread and capabilities.reopen else None
            ),
            lost=lambda run, exc: self._abandon(run, exc, runner),
        )
        watchdog.start()
        await watchdog.store_opened()
        claimers = [
            asyncio.create_task(
                self._claim_loop(self._states[q], runner, notify, stopping),
                name=f"rdq-claim-{q}",
            )
            for q in self.queues
        ]
        background = [
            asyncio.create_task(flow.run(stopping), name="rdq-flow"),
            asyncio.create_task(fleet.run(leaving), name="rdq-fleet"),
            asyncio.create_task(
                heartbeat_loop(
                    self.storage,
                    self.clock,
                    self._runs.values,
                    self.worker_id,
                    self.log,
                    lambda: min(self.app.queue_config(q).lease for q in self.queues),
                    lambda run: self._fence(run, runner),
                    lambda run, exc: self._abandon(run, exc, runner),
                    lambda: watchdog.renewing,
                ),
                name="rdq-heartbeat",
            ),
        ]
        if any(self.app.schedule_queue(s) in self.queues for s in self.app.schedules.values()):
            background.append(
                asyncio.create_task(
                    schedule_loop(
                        self.app,
                        Client(self.storage, self.app, keys=self.keys),
                        self.storage.now,
                        self.queues,
                        self.log,
                    ),
                    name="rdq-schedules",
                )
            )
        if self.maintenance:
            background.append(
                asyncio.create_task(
                    maintenance_loop(
                        self.app,
                        self.storage,
                        self.queues,
                        self.clock,
                        self.log,
                        stats_interval=self.stats_interval,
                        purge_interval=self.purge_interval,
                        fleet=fleet,
                        runner=self.worker_id,
                    ),
                    name="rdq-maintenance",
                )
            )
        self.log.info(
            "worker started",
            worker_id=self.worker_id,
            queues=self.queues,
            max_unrecorded=self._held.max_freed_early,
        )
        try:
            await stopping.wait()
            fleet.state = "stopping"
            await _quietly(fleet.heartbeat(), self.log)
            await asyncio.gather(*claimers, return_exceptions=True)
            await drain(
                self._held_runs,
                lambda: [run for state in self._states.values() for run in state.unstarted()],
                start,
                hurry=self._hurry,
                hurried=self._stop_requests >= 2,
                grace_period=self.grace_period,
                log=self.log,
                worker_id=self.worker_id,
            )
            await runner.written(INTERRUPT_WAIT)
            if self._side_tasks:
                await asyncio.wait(list(self._side_tasks), timeout=INTERRUPT_WAIT)
            if completer is not None:
                await completer.aclose()
        finally:
            runner.deadlines.close()
            if completer is not None:
                completer.cancel()
            await _cancel_all(claimers + background)
            await watchdog.stop()
            threads.close()
            leaving.set()
            await fleet.leave()
            self.log.info("worker stopped", worker_id=self.worker_id)

    def _held_runs(self) -> list[Run]:
        """The runs this worker holds, copied for the watchdog thread. The copy is one C-level
        pass under the GIL; should the dict change under it all the same, try again."""
        for _ in range(5):
            try:
                return list(self._runs.values())
            except RuntimeError:  # changed size during the copy
                continue
        return []

    def _side_task(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)
        return task

    def _fence(self, run: Run, runner: Runner) -> None:
        run.fenced = True
        fencing = self._side_task(runner.fence_off(run))

        def fenced(done: asyncio.Task[None]) -> None:
            run.release()

        fencing.add_done_callback(fenced)

    def _abandon(self, run: Run, reason: Exception, runner: Runner) -> None:
        """A renewal was refused: the task is no longer ours. Cancel its handler (one in a
        thread is fenced off: its result is ignored) and say why."""
        if run.done:
            return
        metrics.STALE_CLAIMS.labels(run.queue).inc()
        if run.task is not None:
            run.task.cancel()
        else:  # claimed ahead, never started: let it go
            run.release()
        self._side_task(runner.report_abandoned(run, reason))

    def _note_retry(self, queue: str, delay: float) -> None:
        state = self._states.get(queue)
        if state is not None:
            state.next_due = min(state.next_due, self.clock.mono() + delay)


async def _quietly(call: Any, log: Any) -> None:
    """Await ``call``; an error (the store is down at start) is logged and left to the loops
    that retry."""
    try:
        await call
    except Exception as exc:
        log.warning("a read before the first claim failed; the loops retry it", error=str(exc))


async def _cancel_all(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait for them, cancelling again every second those still running:
    on Python 3.11 an ``asyncio.wait_for`` whose future completes as its task is cancelled
    returns the result and drops the cancellation (gh-86296), so a loop (the upkeep's, on a
    store that calls ``wait_for``) can go on after one ``cancel()`` and hold the worker's stop
    for ever."""
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=1.0)
    await asyncio.gather(*tasks, return_exceptions=True)
