"""Running one claimed task: resolve its config and handler, call it under its timeout,
classify the outcome and write it back with the claim's fencing token.

Nothing here holds a storage connection while the handler runs: the storage is called before
(never) and after (one resolution call, or a share of a batched ``complete_many``) the handler.

A task's path is kept short, because with fast handlers the engine's own work per task is
what a worker spends most: one asyncio task runs the handler (its timeout is a deadline in
the worker's shared :class:`~rdq._deadlines.Deadlines`, not a timer of its own), and a success
handed to the :class:`~rdq._completer.Completer` ends that task at once; the outcome of the
batched write comes back as a call of :meth:`Runner.recorded`, not through a future per task.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from rdq import _classify, _otel, _tracebacks, metrics
from rdq._app import App, HandlerImportError, TaskContext
from rdq._classify import Action, Decision
from rdq._clock import StorageClock
from rdq._completer import Completer
from rdq._deadlines import Deadlines
from rdq._invoke import invoke
from rdq._threads import HandlerThreads
from rdq.config import QueueConfig, resolve
from rdq.errors import NotFound, StaleClaim, StorageUnavailable
from rdq.spi import Attempt, Claimed, Completion, Envelope, Outcome, Status, Storage, limits

if TYPE_CHECKING:
    from rdq._threads import Call

__all__ = ["Holder", "Run", "Runner"]


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
        "write_deadline",
        "write_pause",
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
        self.timing = False
        """The deadline is being watched (the handler runs)."""
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
        self.attempt: Attempt | None = None
        self.write_deadline = 0.0
        self.write_pause = 0.0
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


class Runner:
    """Executes claimed tasks for a worker. One instance per worker."""

    def __init__(
        self,
        app: App,
        storage: Storage,
        clock: StorageClock,
        threads: HandlerThreads,
        worker_id: str,
        log: Any,
        rng: random.Random | None = None,
        on_retry: Callable[[str, float], None] | None = None,
        completer: Completer[Run] | None = None,
        spawn: Callable[[Coroutine[Any, Any, None]], object] | None = None,
    ) -> None:
        """``on_retry(queue, delay)`` is told of every retry scheduled (a wake-up hint).
        With a ``completer`` (stores with ``batch_complete``) successes are recorded through
        it, batched with other tasks' successes, and its results must come back to
        :meth:`recorded`; otherwise one ``complete`` call each. ``spawn(coro)`` runs the rare
        follow-ups of a batched write (reports that need the store) as a task the worker
        waits for when it stops."""
        self.app = app
        self.storage = storage
        self.clock = clock
        self.threads = threads
        self.worker_id = worker_id
        self.log = log
        self.rng = rng
        self.on_retry = on_retry
        self.completer = completer
        self.deadlines = Deadlines()
        self._spawn = spawn or asyncio.ensure_future
        self._attempt_counters: dict[tuple[str, Outcome], Any] = {}
        self._durations: dict[str, Any] = {}
        self._writing = 0
        self._written: asyncio.Event | None = None

    def _attempts(self, queue: str, outcome: Outcome) -> Any:
        """The attempts counter child for (queue, outcome), looked up once."""
        key = (queue, outcome)
        child = self._attempt_counters.get(key)
        if child is None:
            child = self._attempt_counters[key] = metrics.ATTEMPTS.labels(queue, outcome.value)
        return child

    def _duration(self, queue: str) -> Any:
        child = self._durations.get(queue)
        if child is None:
            child = self._durations[queue] = metrics.HANDLER_DURATION.labels(queue)
        return child

    async def execute(self, run: Run) -> None:
        """Run ``run``'s task to one recorded outcome (or to a lost lease), then release it
        (a success with the completer is released when its write returns). Never raises
        except ``CancelledError`` when the whole worker is cancelled. With OpenTelemetry the
        attempt is a span (see :mod:`rdq._otel`)."""
        try:
            task = run.claimed.task
            span = _otel.attempt_span(
                task.queue, task.id, task.handler_ref, task.attempt_count + 1, task.headers
            )
            if span is None:
                decision = await self._decide(run)
                if decision is not None:
                    await self._finish(run, decision)
                return
            with span as current:
                decision = await self._decide(run)
                _otel.finish_attempt(
                    current,
                    decision.outcome.value if decision is not None else None,
                    decision.error_type if decision is not None else None,
                )
                if decision is not None:
                    await self._finish(run, decision)
        except Exception as exc:  # a bug: the task runs again once its lease expires
            self.log.error(
                "task runner failed",
                task_id=run.claimed.task.id,
                queue=run.queue,
                worker_id=self.worker_id,
                error=repr(exc),
            )
        finally:
            if not run.writing:
                run.release()

    async def _decide(self, run: Run) -> Decision | None:
        """What this attempt comes to — running the handler if it is to run — or None when
        the lease was lost or the outcome is already written (fenced off)."""
        task = run.claimed.task
        run.number = task.attempt_count + 1
        if run.interrupted:  # claimed ahead, the worker stopped before it could start
            return INTERRUPTED_UNSTARTED
        run.used = run.number - _interrupted_since_redrive(task)
        run.started = self.clock.now()
        if task.corrupt is not None:  # never run: what it holds is not what was written
            return _corrupt(task)
        config = run.config = resolve(self.app.queue_config(task.queue), task.retry)
        if run.used > config.max_attempts:
            return _exhausted(task, run.used, config)
        try:
            target = self.app.resolve(task.handler_ref)
        except HandlerImportError as exc:
            failed = _classify.classify_import_error(exc, run.used, config, rng=self.rng)
            self.log.error(
                "could not import the handler; the attempt counts as failed",
                **self._fields(task.id, task.queue, run.number),
                handler=task.handler_ref,
                error=failed.error_message,
                exception=failed.traceback,
            )
            return failed
        if target is None:
            return _unknown(task)
        run.ctx_fields = (self.worker_id, run.number)
        t0 = time.monotonic()
        decision = await invoke(
            run, target, None, config, run.used, self.threads, self.rng, self.deadlines
        )
        if decision is None or run.fenced:  # lost lease, or the outcome is already written
            return None
        self._duration(task.queue).observe(time.monotonic() - t0)
        return decision

    async def fence_off(self, run: Run) -> None:
        """Record TIMEOUT for a handler that would not stop when its timeout cancelled it;
        its coroutine is left behind and whatever it does later is ignored."""
        if run.config is None or run.started is None:
            return
        self.log.error(
            "handler ignored its cancellation; recording TIMEOUT without it",
            **self._fields(run.claimed.task.id, run.queue, run.number),
        )
        where = None
        if run.task is not None:
            line = f"{_classify.TIMEOUT_ERROR}: {_classify.timeout_message(run.config)}\n"
            where = _tracebacks.coroutine_stack(run.task.get_coro(), line)
        decision = _classify.classify_timeout(where, run.used, run.config, rng=self.rng)
        await self._finish(run, decision)

    def _attempt(self, run: Run, decision: Decision) -> Attempt:
        """The attempt record of ``decision``; every text within the contract's limits."""
        if decision is _classify.SUCCESS:
            return Attempt(
                number=run.number,
                outcome=Outcome.SUCCEEDED,
                started_at=run.started,
                finished_at=self.clock.now(),
                worker_id=self.worker_id,
            )
        return Attempt(
            number=run.number,
            outcome=decision.outcome,
            error_type=_bounded(decision.error_type, limits.MAX_ERROR_TYPE_LENGTH),
            error_message=_bounded(decision.error_message, limits.MAX_ERROR_MESSAGE_LENGTH),
            started_at=run.started,
            finished_at=self.clock.now(),
            worker_id=self.worker_id,
            traceback=(
                None
                if decision.traceback is None
                else _tracebacks.bound_tail(decision.traceback, limits.MAX_TRACEBACK_LENGTH)
            ),
        )

    async def _finish(self, run: Run, decision: Decision) -> None:
        """Write the attempt and the decision. An outage (``StorageUnavailable``) is retried
        until the lease is surely gone; any other refusal is not retried. Either way an
        outcome that could not be written is logged with what it was, and the task runs
        again once its lease expires. A success with the completer is only handed over
        here (see :meth:`recorded`)."""
        task = run.claimed.task
        run.resolving = True
        attempt = run.attempt = self._attempt(run, decision)
        completer = self.completer
        if decision.action is Action.COMPLETE and completer is not None:
            run.write_deadline = time.monotonic() + 2 * run.lease
            run.write_pause = 0.05
            self._hand_over(run, completer)
            run.offer_slot()  # the next task may start while this one is written
            return
        deadline = time.monotonic() + 2 * run.lease
        pause = 0.05
        rng = self.rng or random
        while True:
            try:
                await self._write(run, attempt, decision)
                break
            except StaleClaim:
                metrics.STALE_CLAIMS.labels(run.queue).inc()
                await self._report_stale(run, decision)
                return
            except NotFound:
                self._report_vanished(run)
                return
            except StorageUnavailable as exc:
                metrics.STORAGE_ERRORS.labels(decision.action.value).inc()
                if time.monotonic() + pause > deadline or run.lost:
                    self._report_unwritten(run, attempt, exc)
                    return
                await asyncio.sleep(pause * (0.5 + rng.random()))
                pause = min(pause * 2, 5.0)
            except Exception as exc:  # refused for good (a bug, a schema problem): no retry
                metrics.STORAGE_ERRORS.labels(decision.action.value).inc()
                self._report_unwritten(run, attempt, exc)
                return
        self._attempts(run.queue, decision.outcome).inc()
        if decision.action is Action.COMPLETE:
            return
        fields = self._fields(task.id, run.queue, run.number)
        fields.update(
            outcome=decision.outcome.value,
            error_type=attempt.error_type,
            error=attempt.error_message,
        )
        if attempt.traceback is not None:
            fields["exception"] = attempt.traceback
        if decision.action is Action.DEAD_LETTER:
            metrics.DEAD_LETTERED.labels(run.queue).inc()
            self.log.warning("dead-lettered", **fields)
        else:
            self.log.info("retry scheduled", **fields, delay=round(decision.delay, 3))

    # --- batched successes -----------------------------------------------------------------

    def _hand_over(self, run: Run, completer: Completer[Run]) -> None:
        if not run.writing:
            run.writing = True
            self._writing += 1
        attempt = run.attempt
        if attempt is None:  # set by _finish before any hand-over
            raise RuntimeError("a success is handed over without its attempt record")
        completer.submit(Completion(run.claimed.task.id, run.claimed.token, attempt), run)

    def recorded(self, results: list[tuple[Run, BaseException | None]]) -> None:
        """The completer's report of one flush: each run's success was recorded (``None``)
        or why not. Successes are counted, their runs released; an outage is retried
        through the completer until the lease is surely gone."""
        counted: dict[str, int] = {}
        for run, error in results:
            if error is None:
                counted[run.queue] = counted.get(run.queue, 0) + 1
                self._written_one(run)
            else:
                self._not_recorded(run, error)
        for queue, count in counted.items():
            self._attempts(queue, Outcome.SUCCEEDED).inc(count)

    def _written_one(self, run: Run) -> None:
        if run.writing:
            run.writing = False
            self._writing -= 1
            if not self._writing and self._written is not None:
                self._written.set()
        run.release()

    def _not_recorded(self, run: Run, error: BaseException) -> None:
        if isinstance(error, StorageUnavailable):
            metrics.STORAGE_ERRORS.labels(Action.COMPLETE.value).inc()
            pause = run.write_pause
            if time.monotonic() + pause <= run.write_deadline and not run.lost:
                run.write_pause = min(pause * 2, 5.0)
                delay = pause * (0.5 + (self.rng or random).random())
                asyncio.get_running_loop().call_later(delay, self._retry_write, run)
                return
        self._written_one(run)
        if isinstance(error, asyncio.CancelledError):  # the worker is being torn down
            return
        if isinstance(error, StaleClaim):
            metrics.STALE_CLAIMS.labels(run.queue).inc()
            self._spawn(self._report_stale(run, _classify.SUCCESS))
        elif isinstance(error, NotFound):
            self._report_vanished(run)
        else:
            if not isinstance(error, StorageUnavailable):
                metrics.STORAGE_ERRORS.labels(Action.COMPLETE.value).inc()
            if run.attempt is not None and isinstance(error, Exception):
                self._report_unwritten(run, run.attempt, error)

    def _retry_write(self, run: Run) -> None:
        completer = self.completer
        if completer is None or completer.closed:
            self._written_one(run)
            return
        self._hand_over(run, completer)

    async def written(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds until no success waits for its batched write
        (retries of a failed flush included)."""
        if not self._writing:
            return
        self._written = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._written.wait(), timeout)

    # --- reports ---------------------------------------------------------------------------

    def _report_vanished(self, run: Run) -> None:
        self.log.warning(
            "task vanished while running (purged?)",
            **self._fields(run.claimed.task.id, run.queue, run.number),
        )

    def _report_unwritten(self, run: Run, attempt: Attempt, exc: Exception) -> None:
        self.log.error(
            "could not record the outcome; the task runs again after its lease expires",
            **self._fields(run.claimed.task.id, run.queue, run.number),
            outcome=attempt.outcome.value,
            error_type=attempt.error_type,
            error=attempt.error_message,
            storage_error=repr(exc),
        )

    async def _report_stale(self, run: Run, decision: Decision) -> None:
        fields = self._fields(run.claimed.task.id, run.queue, run.number)
        if await self._was_cancelled(run.claimed.task.id):
            self.log.warning(
                "task cancelled by an operator while it ran; its outcome is not recorded",
                **fields,
                outcome=decision.outcome.value,
            )
        else:
            self.log.warning(
                "stale claim: the lease was lost, outcome not recorded",
                **fields,
                outcome=decision.outcome.value,
            )

    async def report_abandoned(self, run: Run, reason: Exception) -> None:
        """Log that ``run``'s handler was abandoned because a renewal was refused, and why:
        an operator cancelled the task, or the lease was lost to another worker."""
        task = run.claimed.task
        fields = self._fields(task.id, run.queue, task.attempt_count + 1)
        if await self._was_cancelled(task.id):
            self.log.warning("task cancelled by an operator; abandoning its handler", **fields)
        else:
            self.log.warning(
                "lease lost; abandoning the handler (another worker may run the task)",
                **fields,
                reason=type(reason).__name__,
            )

    async def _was_cancelled(self, task_id: str) -> bool:
        """True if the task is CANCELLED now (one ``get``; False if that fails)."""
        try:
            return (await self.storage.get(task_id)).status == Status.CANCELLED
        except Exception:
            return False

    def _fields(self, task_id: str, queue: str, attempt: int) -> dict[str, Any]:
        """What every log line about one attempt carries."""
        return {"task_id": task_id, "queue": queue, "attempt": attempt, "worker_id": self.worker_id}

    async def _write(self, run: Run, attempt: Attempt, decision: Decision) -> None:
        task_id, token = run.claimed.task.id, run.claimed.token
        if decision.action is Action.COMPLETE:
            await self.storage.complete(task_id, token, attempt)
        elif decision.action is Action.DEAD_LETTER:
            await self.storage.dead_letter(task_id, token, attempt)
        else:
            next_at = self.clock.now() + timedelta(seconds=decision.delay)
            await self.storage.reschedule(task_id, token, attempt, next_at)
            if self.on_retry is not None:
                self.on_retry(run.queue, decision.delay)


def _bounded(text: str | None, limit: int) -> str | None:
    return None if text is None else _tracebacks.bound_head(text, limit)


INTERRUPTED_UNSTARTED = Decision(
    Action.RESCHEDULE,
    Outcome.INTERRUPTED,
    0.0,
    _classify.INTERRUPTED_ERROR,
    "the worker shut down before the handler started (the task was claimed ahead)",
)


def _corrupt(task: Envelope) -> Decision:
    return Decision(
        Action.DEAD_LETTER,
        Outcome.PERMANENT,
        0.0,
        _classify.CORRUPT_TASK,
        f"the stored task does not decode: {task.corrupt}",
    )


def _exhausted(task: Envelope, used: int, config: QueueConfig) -> Decision:
    return Decision(
        Action.DEAD_LETTER,
        Outcome.PERMANENT,
        0.0,
        _classify.ATTEMPTS_EXHAUSTED,
        f"{used - 1} attempts used (last: {_last_outcome(task)}) before this claim; "
        f"max_attempts is {config.max_attempts}",
    )


def _unknown(task: Envelope) -> Decision:
    return Decision(
        Action.DEAD_LETTER,
        Outcome.PERMANENT,
        0.0,
        _classify.UNKNOWN_HANDLER,
        f"no handler for {task.handler_ref!r} (not registered, no invoker for its "
        "scheme, not an allowed import path)",
    )


def _interrupted_since_redrive(task: Envelope) -> int:
    """INTERRUPTED attempts since the last redrive: a graceful shutdown does not use up one
    of the task's attempts."""
    count = task.attempt_count
    if not count or not task.attempts:
        return 0
    recent = task.attempts[-count:]
    return sum(1 for a in recent if a.outcome == Outcome.INTERRUPTED)


def _last_outcome(task: Envelope) -> str:
    return task.attempts[-1].outcome.value if task.attempts else "unknown"
