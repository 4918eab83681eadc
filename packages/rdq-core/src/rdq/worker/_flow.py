"""The worker's side of flow control: it keeps the control records of its queues fresh, feeds
each outcome to the breaker of the task's key, and makes the transitions its own outcomes and
the clock call for (trip, probe, close, ramp), each by compare-and-set on the store's record,
so that N workers agree and probe with one bounded total. The declared limits of its queues
are kept in the same records, by :class:`~rdq.worker._limits.LimitKeeper`, at each refresh.

What a transition is, is :mod:`rdq.flow`'s to say; this module only applies it. A store
without the ``control`` capability gets breakers of this worker's own (nothing shared, and
claims the store cannot hold back are deferred here before their handler runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec

from rdq import flow, metrics
from rdq.app import App
from rdq.audit import Action as AuditAction
from rdq.audit import record_action
from rdq.errors import ControlConflict
from rdq.flow import Breaker
from rdq.retry import Action, Decision
from rdq.spi import Control, Envelope, Outcome, Storage
from rdq.worker._clock import StorageClock
from rdq.worker._limits import LimitKeeper
from rdq.worker._order import DeclaredOrder
from rdq.worker._run import Run

__all__ = ["REFRESH", "FlowControl"]

REFRESH = 1.0
"""Seconds between two reads of a queue's control records (a change made elsewhere — a pause,
another worker's trip — reaches this worker within that; the store's claim honours it at
once anyway)."""
ALERT_EVERY = 300.0
"""Seconds between two ERROR lines about one breaker held open too long."""
REREAD = 0.1
"""Seconds between two reads of a queue's control records while one of its keys fails on
this worker (another worker's trip reaches it within that, not within :data:`REFRESH`)."""
THROTTLE_DELAY = 1.0
"""Seconds (and up to as many again) before a task handed back by the throttle of a failing
key is due again."""
_STATE_GAUGE = {flow.State.CLOSED: 0, flow.State.HALF_OPEN: 1, flow.State.OPEN: 2}


class FlowControl:
    """Breakers and the other controls of one worker's queues."""

    def __init__(
        self,
        app: App,
        storage: Storage,
        clock: StorageClock,
        queues: Sequence[str],
        worker_id: str,
        log: Any,
        rng: random.Random | None = None,
    ) -> None:
        self.app = app
        self.storage = storage
        self.clock = clock
        self.queues = list(queues)
        self.worker_id = worker_id
        self.log = log
        self.rng = rng or random.Random()
        self.shared = storage.capabilities().control
        """True when the store keeps the controls (and its claims honour them)."""
        self._controls: dict[str, dict[str, Control]] = {q: {} for q in self.queues}
        self._windows: defaultdict[tuple[str, str], flow.Window] = defaultdict(flow.Window)
        self._alerted: dict[tuple[str, str], float] = {}
        self._running: Counter[tuple[str, str]] = Counter()
        """This worker's tasks of each key that passed :meth:`hold` and have not ended."""
        self._counted: dict[str, tuple[str, str]] = {}
        self._answered: dict[tuple[str, str], datetime] = {}
        """When a call on each key last came back otherwise than outage-class (store time)."""
        self._outage_types: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
        """The outage-class error types seen on each key since then."""
        self._read_at: dict[str, float] = {}
        self._reading: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.limits = LimitKeeper(app, storage, clock, worker_id, log, self.apply)
        """The declared limits of the queues, kept in the same records."""
        self.declared: DeclaredOrder | None = None
        """The claim order the queue configs declare, written at a refresh until it is."""

    # --- what the worker asks -------------------------------------------------------------

    def breaker(self, queue: str, key: str) -> flow.BreakerState:
        return flow.breaker_of(self._controls.get(queue, {}).get(key))

    def outages(self, task: Envelope) -> list[flow.Outage]:
        """The remembered outages of ``task``'s breaker key (its attempts that failed during
        one are not charged)."""
        return self.breaker(task.queue, flow.breaker_key(task)).outages

    async def hold(self, task: Envelope) -> Decision | None:
        """The decision that hands ``task`` back unrun, or ``None``: it may run (call
        :meth:`ended` when it has). A task is held when a key of it is paused (claimed just
        before the pause), when its breaker is open (claimed just before it opened, or from a
        store that cannot hold it back), and when the last calls on its key all failed
        outage-class and this worker already runs as many of them as a half-open breaker
        would (``probes``); held, it uses up no attempt."""
        key = flow.paused_key(task, self._controls.get(task.queue, {}), self.shared)
        if key is not None:
            return Decision(
                Action.RESCHEDULE,
                Outcome.DEFERRED,
                0.0,
                "rdq.Paused",
                f"held: {key} of queue {task.queue} is paused; no attempt used",
            )
        config = self.app.breaker_for(task.queue, task.handler_ref)
        if not config.enabled:
            return None
        slot = (task.queue, flow.breaker_key(task))
        window = self._windows.get(slot)
        if window is not None and window.streak and self.shared:
            await self._reread(task.queue)  # another worker may have tripped it just now
        breaker = self.breaker(*slot)
        if breaker.state is flow.State.OPEN and not (
            self.shared and flow.claimed_since(task, breaker)  # else a probe let through
        ):
            return self.deferral(breaker)
        if window is not None and window.failing(config) and self._running[slot] >= config.probes:
            return self._throttled(slot[1], window, config)
        self._running[slot] += 1
        self._counted[task.id] = slot
        return None

    def ended(self, task: Envelope) -> None:
        """``task``, which :meth:`hold` let run, has ended (whatever its outcome)."""
        slot = self._counted.pop(task.id, None)
        if slot is not None:
            self._running[slot] -= 1
            if self._running[slot] <= 0:
                del self._running[slot]

    def _throttled(self, key: str, window: flow.Window, config: Breaker) -> Decision:
        wait = THROTTLE_DELAY + self.rng.uniform(0, THROTTLE_DELAY)
        return Decision(
            Action.RESCHEDULE,
            Outcome.DEFERRED,
            wait,
            "rdq.DependencyFailing",
            f"held: the last {window.streak} calls on {key} failed outage-class; this worker "
            f"runs {config.probes} of its tasks at once until one comes back; no attempt used",
        )

    def deferral(self, breaker: flow.BreakerState, decision: Decision | None = None) -> Decision:
        """The decision that holds a task while ``breaker`` is open: rescheduled for when it
        may be probed (a little spread), without using up an attempt."""
        now = self.clock.now()
        until = breaker.until or now + timedelta(seconds=max(breaker.cooldown, 1.0))
        wait = max(0.0, (until - now).total_seconds()) + self.rng.uniform(0, 1.0)
        if decision is not None and decision.retry_after:
            wait = max(wait, decision.retry_after)  # the service said when to come back
        message = "held: its dependency is down (breaker open); no attempt used"
        if decision is not None and decision.error_message:
            message = f"{decision.error_message} — held, breaker open; no attempt used"
        return Decision(
            Action.RESCHEDULE,
            Outcome.DEFERRED,
            wait,
            decision.error_type if decision is not None else "rdq.BreakerOpen",
            message,
            decision.traceback if decision is not None else None,
            True,
        )

    async def record(self, run: Run, decision: Decision) -> Decision:
        """Feed one outcome to its key's breaker; make the transition it calls for; return
        the decision to write (an outage-class failure while the breaker is not closed is
        held without using up an attempt)."""
        task = run.claimed.task
        if self.shared and decision.retry_after is not None:
            await self.limits.record(task, decision)
        config = self.app.breaker_for(task.queue, task.handler_ref)
        if not config.enabled or decision.outcome in (Outcome.DEFERRED, Outcome.SNOOZED):
            return decision
        key = flow.breaker_key(task)
        queue = task.queue
        failed = decision.action is not Action.COMPLETE
        outage = failed and decision.outage
        window = self._windows[(queue, key)]
        mono = self.clock.mono()
        finished = run.finished or self.clock.now()
        window.add(mono, outage, decision.error_type, config, finished)
        self._remember(queue, key, outage, decision, finished)
        state = self.breaker(queue, key).state
        if (
            state is flow.State.OPEN
            and self.shared
            and flow.claimed_since(task, self.breaker(queue, key))
        ):
            await self._read(queue)  # a probe run on a stale view: its outcome is the probe's
            state = self.breaker(queue, key).state
        if state is flow.State.HALF_OPEN:  # a probe's outcome
            if outage:
                await self._change(
                    queue,
                    key,
                    lambda c: (
                        _when(c, flow.State.HALF_OPEN)
                        and flow.reopen(c, self.clock.now(), config, _types(decision))
                    ),
                    "breaker.open",
                    f"a probe failed: {decision.error_type}",
                )
            elif not failed:
                await self._change(
                    queue,
                    key,
                    lambda c: (
                        _when(c, flow.State.HALF_OPEN) and flow.close(c, self.clock.now(), config)
                    ),
                    "breaker.close",
                    "a probe succeeded",
                )
                window.clear()
        elif state is flow.State.CLOSED and outage and window.trips(mono, config):
            streak = window.streak >= config.min_calls
            started = (
                window.streak_from if streak else window.first_failure(mono, config)
            ) or self.clock.now()
            types = sorted(window.error_types | set(_types(decision)))
            why = (
                f"the last {window.streak} calls failed outage-class"
                if streak
                else f"outage-class failures dominate the last {config.window:g}s"
            )
            await self._change(
                queue,
                key,
                lambda c: _trip(c, self.clock, config, started, types, decision, task.id),
                "breaker.open",
                f"{why}: {decision.error_type}",
            )
        elif state is flow.State.CLOSED and outage and decision.action is Action.DEAD_LETTER:
            await self._trip_on_own_failures(run, decision, key, config)
        if outage and self.breaker(queue, key).state is not flow.State.CLOSED:
            max_attempts = run.config.max_attempts if run.config is not None else 1
            held_for = flow.held_too_long(task, max_attempts, config, self.clock.now())
            if held_for is not None:
                return _too_long(decision, held_for, config)
            await self._widen(queue, key, config)
            metrics.DEFERRED.labels(queue).inc()
            return self.deferral(self.breaker(queue, key), decision)
        return decision

    def _remember(
        self, queue: str, key: str, outage: bool, decision: Decision, finished: datetime
    ) -> None:
        """What a task's own failures are judged against: when a call on the key last came
        back otherwise than outage-class, and the outage-class types seen since."""
        slot = (queue, key)
        if not outage:
            self._answered[slot] = finished
            self._outage_types.pop(slot, None)
        elif decision.error_type is not None:
            self._outage_types[slot].add(decision.error_type)

    async def _trip_on_own_failures(
        self, run: Run, decision: Decision, key: str, config: Breaker
    ) -> None:
        """A task used up its attempts on outage-class failures before any window could
        fill (a quiet queue): when nothing says its key worked since the first of them, they
        are the evidence, and the breaker trips from that first failure (so none of them is
        charged, and the task is held like the rest of its key's)."""
        task, queue = run.claimed.task, run.claimed.task.queue
        now = self.clock.now()
        slot = (queue, key)
        started = flow.own_outage(
            task,
            decision.error_type,
            self._outage_types.get(slot, ()),
            self._answered.get(slot),
            self.breaker(queue, key).outages,
            now,
        )
        if started is None:
            return
        types = sorted(self._outage_types.get(slot, set()) | set(_types(decision)))
        await self._change(
            queue,
            key,
            lambda c: _trip(c, self.clock, config, started, types, decision, task.id),
            "breaker.open",
            f"a task used up its attempts on outage-class failures, and no call on {key} "
            f"came back otherwise since {started.isoformat(timespec='seconds')}: "
            f"{decision.error_type}",
        )

    async def _reread(self, queue: str) -> None:
        """Read the queue's control records again unless that was done within
        :data:`REREAD` (one read at a time per queue); a store that cannot answer is left to
        the next refresh."""
        async with self._reading[queue]:
            if self.clock.mono() - self._read_at.get(queue, -math.inf) < REREAD:
                return
            with contextlib.suppress(Exception):
                await self._read(queue)

    # --- keeping up with the store and the clock ---------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        """Until ``stopping``: read the controls, then make the transitions the clock calls for
        (an open breaker whose cool-down passed is probed; a ramp steps up), every
        :data:`REFRESH` seconds."""
        while not stopping.is_set():
            try:
                await self.refresh()
                if self.declared is not None and self.declared.pending:
                    await self.declared.apply()
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an outage of the store: the claims wait it out too
                self.log.warning("flow control: cannot read the controls", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), REFRESH)

    async def refresh(self) -> None:
        """Read every queue's control records and bring their limits in line with the app's
        (a store without ``control``: nothing to read, and declared limits are not held)."""
        if not self.shared:
            self.limits.warn_unenforced(self.queues)
            return
        for queue in self.queues:
            await self._read(queue)
            await self.limits.reconcile(queue, self._controls[queue])

    async def _read(self, queue: str) -> None:
        self._read_at[queue] = self.clock.mono()
        found = await self.storage.list_controls(queue)
        self._controls[queue] = {c.key: c for c in found}
        for control in found:
            if "breaker" in control.state:
                state = flow.breaker_of(control).state
                metrics.BREAKER_STATE.labels(queue, control.key).set(_STATE_GAUGE[state])

    async def tick(self) -> None:
        now = self.clock.now()
        for queue, controls in self._controls.items():
            for key, control in list(controls.items()):
                if "breaker" not in control.state:
                    continue
                breaker = flow.breaker_of(control)
                config = self._config_of(queue, key)
                if breaker.state is not flow.State.CLOSED:
                    await self._widen(queue, key, config)
                if breaker.state is flow.State.OPEN:
                    self._alert(queue, key, breaker, config, now)
                    if flow.begin_probing(control, now, config) is not None:
                        await self._change(
                            queue,
                            key,
                            functools.partial(_at_now, flow.begin_probing, self.clock, config),
                            "breaker.probe",
                            f"cool-down of {breaker.cooldown:g}s over: {config.probes} probes",
                        )
                elif flow.reprobe(control, now, config) is not None:
                    await self._change(
                        queue,
                        key,
                        functools.partial(_at_now, flow.reprobe, self.clock, config),
                        "breaker.probe",
                        f"no probe came back within {flow.probe_window(config):g}s: "
                        f"{config.probes} more",
                    )
                elif breaker.ramp_from is not None and flow.ramp(control, now, config) is not None:
                    await self._change(
                        queue, key, functools.partial(_at_now, flow.ramp, self.clock, config)
                    )

    async def _widen(self, queue: str, key: str, config: Breaker) -> None:
        """Widen the key's outage in progress back to this worker's oldest failure of it
        (failures here before another worker tripped it are then uncharged too)."""
        window = self._windows.get((queue, key))
        started = None if window is None else window.first_failure(self.clock.mono(), config)
        if window is None or started is None:
            return
        types = sorted(window.error_types)
        await self._change(queue, key, lambda c: flow.widen(c, started, types))

    def _alert(
        self, queue: str, key: str, breaker: flow.BreakerState, config: Breaker, now: Any
    ) -> None:
        opened = breaker.outages[-1].start if breaker.outages else breaker.since
        if opened is None:
            return
        held_for = (now - opened).total_seconds()
        too_long = held_for > config.alert_after
        metrics.BREAKER_OPEN_TOO_LONG.labels(queue, key).set(1 if too_long else 0)
        if not too_long:
            return
        last = self._alerted.get((queue, key), 0.0)
        if time.monotonic() - last < ALERT_EVERY:
            return
        self._alerted[(queue, key)] = time.monotonic()
        self.log.error(
            "breaker open too long: its tasks are held, none is dead-lettered; close it by hand "
            "(rdq breaker close) once the dependency is back, or fix what keeps it down",
            queue=queue,
            key=key,
            open_for=round(held_for),
            error_type=breaker.error_type,
            worker_id=self.worker_id,
        )

    def _config_of(self, queue: str, key: str) -> Breaker:
        if key.startswith("handler:"):
            return self.app.breaker_for(queue, key.removeprefix("handler:"))
        return self.app.queue_config(queue).breaker

    # --- compare-and-set ----------------------------------------------------------------------

    async def apply(
        self, queue: str, key: str, change: Callable[[Control], Control | None]
    ) -> Control | None:
        """Apply ``change`` to the key's record and store it over the version it was read at;
        on a conflict, read it again and re-apply (another worker may have made the
        transition already: ``change`` then gives ``None``). The record as stored, or
        ``None`` when nothing changed."""
        controls = self._controls.setdefault(queue, {})
        for _ in range(5):
            current = controls.get(key) or Control(queue=queue, key=key)
            changed = change(current)
            if changed is None:
                return None
            if not self.shared:
                stored = msgspec.structs.replace(changed, version=current.version + 1)
                controls[key] = stored
                return stored
            try:
                stored = await self.storage.put_control(
                    msgspec.structs.replace(changed, in_use=None),
                    expected_version=current.version,
                )
            except ControlConflict as conflict:
                if conflict.found is None:
                    controls.pop(key, None)
                else:
                    controls[key] = conflict.found
                continue
            controls[key] = msgspec.structs.replace(stored, in_use=current.in_use)
            return stored
        return None

    async def _change(
        self,
        queue: str,
        key: str,
        change: Callable[[Control], Control | None],
        action: AuditAction | None = None,
        reason: str | None = None,
    ) -> Control | None:
        """Apply ``change`` to the key's breaker (see :meth:`apply`) and report the new
        state. Audited when ``action``."""
        before = self.breaker(queue, key)
        stored = await self.apply(queue, key, change)
        if stored is None:
            return None
        breaker = flow.breaker_of(stored)
        metrics.BREAKER_STATE.labels(queue, key).set(_STATE_GAUGE[breaker.state])
        if action is not None:
            metrics.BREAKER_TRANSITIONS.labels(queue, key, breaker.state.value).inc()
            self.log.warning(
                f"breaker {breaker.state.value.replace('_', '-')}",
                queue=queue,
                key=key,
                reason=reason,
                gate=stored.gate,
                worker_id=self.worker_id,
            )
            kept = flow.trail_reason(action, before, breaker, reason)  # not every probe
            if kept is not None and self.storage.capabilities().audit:
                await record_action(
                    self.storage, [], action, queue, {"key": key}, self.worker_id, kept, 0, None
                )
        return stored


def _at_now(
    step: Callable[[Control, Any, Breaker], Control | None],
    clock: StorageClock,
    config: Breaker,
    control: Control,
) -> Control | None:
    return step(control, clock.now(), config)


def _when(control: Control, state: flow.State) -> Control | None:
    """``control`` if its breaker is in ``state`` (else ``None``: the transition is moot)."""
    return control if flow.breaker_of(control).state is state else None


def _types(decision: Decision) -> list[str]:
    return [decision.error_type] if decision.error_type else []


def _trip(
    control: Control,
    clock: StorageClock,
    config: Breaker,
    started: Any,
    types: list[str],
    decision: Decision,
    task_id: str,
) -> Control | None:
    if flow.breaker_of(control).state is not flow.State.CLOSED:
        return None  # another worker tripped it first
    return flow.trip(
        control,
        clock.now(),
        config,
        started=started,
        error_types=types,
        error_type=decision.error_type,
        error_message=decision.error_message,
        sample_task=task_id,
    )


def _too_long(decision: Decision, held_for: float, config: Breaker) -> Decision:
    """Dead-letter a task an outage has held longer than ``config.max_hold`` after its
    attempts would have run out."""
    return Decision(
        Action.DEAD_LETTER,
        decision.outcome,
        0.0,
        flow.OUTAGE_TOO_LONG,
        f"held for an outage of its dependency for {held_for:.0f}s, more than the breaker's "
        f"max_hold of {config.max_hold:g}s, with its attempts used up; last error: "
        f"{decision.error_type}: {decision.error_message}",
        decision.traceback,
        True,
    )
