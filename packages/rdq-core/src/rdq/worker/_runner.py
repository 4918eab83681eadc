"""Running one claimed task: resolve its config and handler, call it under its timeout,
classify the outcome and write it back with the claim's fencing token.

Nothing here holds a storage connection while the handler runs: the storage is called before
(never) and after (one resolution call, or a share of a batched ``complete_many``) the handler.

A task's path is kept short, because with fast handlers the engine's own work per task is what a
worker spends most: one asyncio task runs the handler (its timeout is a deadline in the worker's
shared :class:`~rdq.worker._deadlines.Deadlines`, not a timer of its own), and a success handed to
the :class:`~rdq.worker._completer.Completer` ends that task at once; the outcome of the batched
write comes back as a call of :meth:`Runner.recorded`, not through a future per task.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

from rdq import metrics, retry, tracing
from rdq.app import App, HandlerImportError
from rdq.blobs import reference_of, resolve
from rdq.errors import NotFound, PayloadKeyError, PayloadMissing, StaleClaim, StorageUnavailable
from rdq.keys import Keyring, is_sealed, unsealed
from rdq.retry import Action, Decision, bound_head, bound_tail, coroutine_stack
from rdq.schedules import SCHEDULE_HEADER
from rdq.scrub import Scrubber
from rdq.spi import Attempt, Claimed, Completion, Doubling, Outcome, Status, Storage, bounds
from rdq.worker._clock import StorageClock
from rdq.worker._completer import Completer
from rdq.worker._deadlines import Deadlines
from rdq.worker._fleet import Fleet
from rdq.worker._flow import FlowControl
from rdq.worker._invoke import invoke
from rdq.worker._run import Run
from rdq.worker._threads import HandlerThreads

__all__ = ["WRITE_RETRY_CAP", "WRITE_RETRY_FIRST", "Runner"]

PAYLOAD_MISSING = "rdq.PayloadMissing"
"""The error type of an attempt whose payload's blob was not there: dead-lettered."""

WRITE_RETRY_FIRST = 0.05
WRITE_RETRY_CAP = 5.0
"""Seconds between tries to write an outcome through an outage: doubling from the first to
the cap, until the lease is surely gone (twice the lease after the handler ended)."""


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
        flow: FlowControl | None = None,
        fleet: Fleet | None = None,
        keys: Keyring | None = None,
    ) -> None:
        """``on_retry(queue, delay)`` is told of every retry scheduled (a wake-up hint).
        With a ``completer`` (stores with ``batch_complete``) successes are recorded through
        it, batched with other tasks' successes, and its results must come back to
        :meth:`recorded`; otherwise one ``complete`` call each. ``spawn(coro)`` runs the rare
        follow-ups of a batched write (reports that need the store) as a task the worker
        waits for when it stops. ``keys`` opens sealed payloads (a task whose key it lacks
        waits, see :func:`rdq.retry.payload_unreadable`). Every error message and traceback
        is scrubbed by its queue's :class:`~rdq.scrub.Scrubber` before it is logged, traced,
        fed to a breaker or written."""
        self.app = app
        self.keys = keys
        self.storage = storage
        self.clock = clock
        self.threads = threads
        self.worker_id = worker_id
        self.log = log
        self.rng = rng
        self.on_retry = on_retry
        self.completer = completer
        self.flow = flow
        self.fleet = fleet
        """Counts each outcome written, per queue and minute."""
        """Breakers: an outcome feeds its key's breaker; a held task is deferred unrun."""
        self.deadlines = Deadlines(clock.mono)
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
        attempt is a span (see :mod:`rdq.tracing`)."""
        try:
            task = run.claimed.task
            span = tracing.attempt_span(
                task.queue, task.id, task.handler_ref, task.attempt_count + 1, task.headers
            )
            if span is None:
                decision = await self._decide(run)
                if decision is not None:
                    await self._finish(run, decision)
                return
            with span as current:
                decision = await self._decide(run)
                tracing.finish_attempt(
                    current,
                    decision.outcome.value if decision is not None else None,
                    decision.error_type if decision is not None else None,
                    # scrubbed: what the attempt record will say
                    self.app.queue_config(run.queue).scrub(decision.error_message)
                    if decision is not None
                    else None,
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
            return retry.INTERRUPTED_UNSTARTED
        flow = self.flow
        run.used = retry.attempts_used(task, run.number, flow.outages(task) if flow else ())
        run.started = self.clock.now()
        if task.corrupt is not None:  # never run: what it holds is not what was written
            return retry.corrupt(task)
        config = run.config = retry.resolve(self.app.queue_config(task.queue), task.retry)
        exhausted = retry.exhausted(task, run.used, config)
        if exhausted is not None:
            return exhausted
        if reference_of(task) is not None:  # the payload is in the blob store: read it back
            try:
                task = await resolve(task, self.app.blobs.store)
            except PayloadMissing as exc:
                self.log.error(
                    "the payload's blob is gone; the task is dead-lettered",
                    **self._fields(task.id, task.queue, run.number),
                    error=str(exc),
                )
                return Decision(
                    Action.DEAD_LETTER, Outcome.PERMANENT, 0.0, PAYLOAD_MISSING, str(exc)
                )
            except Exception as exc:  # the blob store did not answer: an ordinary failure
                return retry.classify_error(exc, run.used, config, rng=self.rng)
            run.claimed = Claimed(task, run.claimed.token)
        if is_sealed(task):
            try:
                task = unsealed(task, self.keys)
            except PayloadKeyError as exc:
                self.log.error(
                    "cannot decrypt the payload; the task waits for a worker with its key",
                    **self._fields(task.id, task.queue, run.number),
                    key=exc.version,
                    error=exc.reason,
                )
                return retry.payload_unreadable(task, exc.reason)
            run.claimed = Claimed(task, run.claimed.token)
        try:
            target = self.app.resolve(task.handler_ref)
        except HandlerImportError as exc:
            failed = _scrubbed(
                retry.classify_import_error(exc, run.used, config, rng=self.rng), config.scrub
            )
            self.log.error(
                "could not import the handler; the attempt counts as failed",
                **self._fields(task.id, task.queue, run.number),
                handler=task.handler_ref,
                error=failed.error_message,
                exception=failed.traceback,
            )
            return failed
        if target is None:
            return retry.unknown_handler(task)
        if flow is not None and (held := await flow.hold(task)) is not None:
            return held  # claimed just before a pause or its breaker opened: not run
        run.ctx_fields = (self.worker_id, run.number)
        t0 = self.clock.mono()
        try:
            decision = await invoke(
                run, target, None, config, run.used, self.threads, self.rng, self.deadlines
            )
        finally:
            if flow is not None:
                flow.ended(task)
        run.finished = self.clock.now()
        if decision is None or run.fenced:  # lost lease, or the outcome is already written
            return None
        decision = _scrubbed(decision, config.scrub)
        self._duration(task.queue).observe(self.clock.mono() - t0)
        decision = retry.bound_snoozes(task, decision, config)
        if flow is not None:
            decision = await flow.record(run, decision)
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
            line = f"{retry.TIMEOUT_ERROR}: {retry.timeout_message(run.config)}\n"
            where = coroutine_stack(run.task.get_coro(), line)
        decision = retry.classify_timeout(where, run.used, run.config, rng=self.rng)
        await self._finish(run, _scrubbed(decision, run.config.scrub))

    def _attempt(self, run: Run, decision: Decision) -> Attempt:
        """The attempt record of ``decision``; every text within the contract's limits."""
        if decision is retry.SUCCESS:
            return Attempt(
                number=run.number,
                outcome=Outcome.SUCCEEDED,
                started_at=run.started,
                finished_at=run.finished or self.clock.now(),
                worker_id=self.worker_id,
            )
        if decision.traceback is not None or decision.error_message is not None:
            # the engine's own messages too (a corrupt task quotes what the store holds)
            config = run.config or self.app.queue_config(run.queue)
            decision = _scrubbed(decision, config.scrub)
        return Attempt(
            number=run.number,
            outcome=decision.outcome,
            error_type=_bounded(decision.error_type, bounds.MAX_ERROR_TYPE_LENGTH),
            error_message=_bounded(decision.error_message, bounds.MAX_ERROR_MESSAGE_LENGTH),
            started_at=run.started,
            finished_at=run.finished or self.clock.now(),
            worker_id=self.worker_id,
            traceback=(
                None
                if decision.traceback is None
                else bound_tail(decision.traceback, bounds.MAX_TRACEBACK_LENGTH)
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
            run.write_deadline = self.clock.mono() + 2 * run.lease
            self._hand_over(run, completer)
            run.offer_slot()  # the next task may start while this one is written
            return
        deadline = self.clock.mono() + 2 * run.lease
        backoff: Doubling | None = None
        while True:
            try:
                await self._write(run, attempt, decision)
                break
            except StaleClaim:
                metrics.STALE_CLAIMS.labels(run.queue).inc()
                await self._report_stale(run, decision)
                return
            except NotFound:
                if backoff is not None and self._discarded(run, decision):
                    break  # the write an outage hid went through: its task is gone
                self._report_vanished(run)
                return
            except StorageUnavailable as exc:
                metrics.STORAGE_ERRORS.labels(decision.action.value).inc()
                backoff = backoff or Doubling(WRITE_RETRY_FIRST, WRITE_RETRY_CAP, rng=self.rng)
                pause = backoff.next()
                if self.clock.mono() + pause > deadline or run.lost:
                    self._report_unwritten(run, attempt, exc)
                    return
                await asyncio.sleep(pause)
            except Exception as exc:  # refused for good (a bug, a schema problem): no retry
                metrics.STORAGE_ERRORS.labels(decision.action.value).inc()
                self._report_unwritten(run, attempt, exc)
                return
        self._attempts(run.queue, decision.outcome).inc()
        if self.fleet is not None:
            dead = decision.action is Action.DEAD_LETTER
            self.fleet.count(run.queue, decision.outcome, dead)
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
        discard = self._discards(run)
        completer.submit(Completion(run.claimed.task.id, run.claimed.token, attempt, discard), run)

    def recorded(self, results: list[tuple[Run, BaseException | None]]) -> None:
        """The completer's report of one flush: each run's success was recorded (``None``)
        or why not. Successes are counted, their runs released; an outage is retried
        through the completer until the lease is surely gone."""
        counted: dict[str, int] = {}
        for run, error in results:
            if error is None or (
                isinstance(error, NotFound)
                and run.write_backoff is not None
                and self._discarded(run, retry.SUCCESS)
            ):  # (a discard retried after an outage finds its task gone: it went through)
                counted[run.queue] = counted.get(run.queue, 0) + 1
                self._written_one(run)
            else:
                self._not_recorded(run, error)
        for queue, count in counted.items():
            self._attempts(queue, Outcome.SUCCEEDED).inc(count)
            if self.fleet is not None:
                self.fleet.count(queue, Outcome.SUCCEEDED, n=count)

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
            if run.write_backoff is None:
                run.write_backoff = Doubling(WRITE_RETRY_FIRST, WRITE_RETRY_CAP, rng=self.rng)
            pause = run.write_backoff.next()
            if self.clock.mono() + pause <= run.write_deadline and not run.lost:
                asyncio.get_running_loop().call_later(pause, self._retry_write, run)
                return
        self._written_one(run)
        if isinstance(error, asyncio.CancelledError):  # the worker is being torn down
            return
        if isinstance(error, StaleClaim):
            metrics.STALE_CLAIMS.labels(run.queue).inc()
            self._spawn(self._report_stale(run, retry.SUCCESS))
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

    def _discards(self, run: Run) -> bool:
        """Whether ``run``'s task is deleted as it succeeds: its queue says
        ``keep_succeeded = False`` (the worker checked the store offers it at start) and it is
        no schedule's tick — a tick's task is kept until ``task_ttl``, for it is what tells
        every scheduler that the tick was enqueued (its id), so that it runs once."""
        if self.app.queue_config(run.queue).keep_succeeded:
            return False
        return SCHEDULE_HEADER not in run.claimed.task.headers

    def _discarded(self, run: Run, decision: Decision) -> bool:
        """Whether ``decision`` is a success that deletes ``run``'s task: then a retry after
        an outage that finds the task gone means that the write the outage hid went through
        (or another worker's success, after a reclaim: a claimed task is never purged or
        expired), not that the task vanished."""
        return decision.action is Action.COMPLETE and self._discards(run)

    def _fields(self, task_id: str, queue: str, attempt: int) -> dict[str, Any]:
        """What every log line about one attempt carries."""
        return {"task_id": task_id, "queue": queue, "attempt": attempt, "worker_id": self.worker_id}

    async def _write(self, run: Run, attempt: Attempt, decision: Decision) -> None:
        task_id, token = run.claimed.task.id, run.claimed.token
        if decision.action is Action.COMPLETE and self._discards(run):
            await self.storage.complete(task_id, token, attempt, discard=True)
        elif decision.action is Action.COMPLETE:
            await self.storage.complete(task_id, token, attempt)
        elif decision.action is Action.DEAD_LETTER:
            await self.storage.dead_letter(task_id, token, attempt)
        else:
            next_at = self.clock.now() + timedelta(seconds=decision.delay)
            await self.storage.reschedule(task_id, token, attempt, next_at)
            if self.on_retry is not None:
                self.on_retry(run.queue, decision.delay)


def _scrubbed(decision: Decision, scrub: Scrubber) -> Decision:
    """``decision`` with its error message and traceback scrubbed (see :mod:`rdq.scrub`)."""
    if decision.error_message is None and decision.traceback is None:
        return decision
    return decision._replace(
        error_message=scrub(decision.error_message), traceback=scrub(decision.traceback)
    )


def _bounded(text: str | None, limit: int) -> str | None:
    return None if text is None else bound_head(text, limit)
