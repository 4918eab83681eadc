"""The circuit breaker's rules, as pure functions over a key's control record.

States (kept in ``Control.state["breaker"]``, decided here, stored by compare-and-set):

- *closed*: claims of the key's tasks are not held (no ``breaker`` entry, or ``closed``);
- *open*: ``gate = 0``, no claim takes them, until the cool-down has passed;
- *half-open*: ``gate = probes``, that many claims fleet-wide, until a probe succeeds (closed)
  or fails (open again); when none has come back within the longest cool-down (its worker
  died, say), ``probes`` more (:func:`reprobe`).

A trip opens the breaker for ``cooldown`` seconds; a failed probe opens it again for twice
the last cool-down (at most ``max_cooldown``); a successful probe closes it and sets a rate
limit on the key that starts at ``probes`` per second and doubles every fifth of ``ramp``,
lifted once ``ramp`` has passed (the ramp's rate is kept as ``ramp_rate``; the key's rate is
the slower of it and a rate limit declared for the key, see :func:`rdq.flow.compose`).
Every outage is remembered as a window (start, end, the error types seen) for a day: an
attempt that failed with one of those types inside a window is not charged to its task
(:func:`uncharged`).
"""

from __future__ import annotations

import collections
import enum
from datetime import datetime, timedelta
from typing import Any

import msgspec

from rdq.flow._breaker_config import Breaker
from rdq.flow._compose import compose
from rdq.spi import Control

__all__ = [
    "OUTAGE_MEMORY",
    "BreakerState",
    "Outage",
    "State",
    "Window",
    "begin_probing",
    "breaker_of",
    "close",
    "force_open",
    "probe_window",
    "ramp",
    "ramp_rate_of",
    "reopen",
    "reprobe",
    "trip",
    "widen",
    "with_breaker",
]

OUTAGE_MEMORY = timedelta(days=1)
"""How long an outage window is remembered (an attempt older than that is charged)."""
MAX_REMEMBERED = 20


class State(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Outage(msgspec.Struct, kw_only=True, frozen=True):
    """One outage of a key: from ``start`` to ``end`` (``None`` while it lasts), and the error
    types of the failures that made it."""

    start: datetime
    end: datetime | None = None
    error_types: list[str] = []


class BreakerState(msgspec.Struct, kw_only=True, frozen=True):
    """What the engine keeps about one breaker, in its key's control record."""

    state: State = State.CLOSED
    since: datetime | None = None
    """When it entered this state (store time)."""
    until: datetime | None = None
    """Open: when probing may begin."""
    cooldown: float = 0.0
    """The cool-down of this opening (seconds)."""
    trips: int = 0
    """Openings since it was last closed."""
    error_type: str | None = None
    error_message: str | None = None
    sample_task: str | None = None
    """A task whose failure tripped it (for the console's link)."""
    by: str | None = None
    """Who set this state by hand (``None``: the engine)."""
    reason: str | None = None
    ramp_from: datetime | None = None
    """Closed after an outage: when the ramp began (``None``: no ramp in progress)."""
    ramp_rate: int | None = None
    """The ramp's rate now (claims per second), while one is in progress."""
    outages: list[Outage] = []


def breaker_of(control: Control | None) -> BreakerState:
    """The breaker a control record holds (closed when it holds none)."""
    if control is None:
        return BreakerState()
    raw = control.state.get("breaker")
    if raw is None:
        return BreakerState()
    try:
        return msgspec.convert(raw, BreakerState)
    except msgspec.ValidationError:  # written by a newer or a broken engine: start afresh
        return BreakerState()


def with_breaker(control: Control, breaker: BreakerState, **fields: Any) -> Control:
    """``control`` holding ``breaker`` (and other fields changed)."""
    state = dict(control.state)
    state["breaker"] = msgspec.to_builtins(breaker)
    return msgspec.structs.replace(control, state=state, **fields)


def ramp_rate_of(control: Control | None) -> int | None:
    """The rate of the ramp in progress on ``control``'s key (``None``: none). A ramp begun
    by an engine that kept its rate only in ``Control.rate`` is read from there."""
    breaker = breaker_of(control)
    if control is None or breaker.state is not State.CLOSED or breaker.ramp_from is None:
        return None
    return breaker.ramp_rate if breaker.ramp_rate is not None else control.rate


class Window:
    """One worker's recent attempts on one key: (monotonic time, outage-class?, store time)
    of each; the store time is the attempt's ``finished_at``, so an outage that begins at the
    first failure covers that failure exactly. ``streak`` counts the outage-class failures in
    a row since the last call that came back otherwise (a success, or a failure of the
    task's own), whatever the window holds."""

    __slots__ = ("_bad", "_entries", "error_types", "streak", "streak_from")

    def __init__(self) -> None:
        self._entries: collections.deque[tuple[float, bool, datetime]] = collections.deque()
        self._bad = 0
        """Outage-class entries among ``_entries``, kept as they come and go: every attempt
        adds one entry, so a scan of the window per attempt would cost a busy key's worker
        time in proportion to its rate."""
        self.error_types: set[str] = set()
        self.streak = 0
        self.streak_from: datetime | None = None
        """When the first failure of the streak ended (store time)."""

    def add(
        self, now: float, outage: bool, error_type: str | None, config: Breaker, at: datetime
    ) -> None:
        self._entries.append((now, outage, at))
        self._bad += outage
        self.streak = self.streak + 1 if outage else 0
        self.streak_from = (self.streak_from or at) if outage else None
        if outage and error_type is not None:
            self.error_types.add(error_type)
        self._trim(now, config)

    def _trim(self, now: float, config: Breaker) -> None:
        entries = self._entries
        while entries and entries[0][0] < now - config.window:
            self._bad -= entries.popleft()[1]
        if not self._bad:
            self.error_types.clear()

    def first_failure(self, now: float, config: Breaker) -> datetime | None:
        """When the oldest outage-class failure of the last ``config.window`` seconds ended
        (store time; ``None``: none)."""
        self._trim(now, config)
        if not self._bad:
            return None
        return next((at for _, bad, at in self._entries if bad), None)

    def trips(self, now: float, config: Breaker) -> bool:
        """True when outage-class failures dominate the recent attempts, or the last
        ``min_calls`` of them were all outage-class (a key that was healthy a moment ago
        trips as fast as one that was idle)."""
        self._trim(now, config)
        if self.streak >= config.min_calls:
            return True
        calls = len(self._entries)
        if calls < config.min_calls:
            return False
        return self._bad >= config.threshold * calls

    def failing(self, config: Breaker) -> bool:
        """True while the last ``probes`` calls on the key all failed outage-class: the
        worker then runs at most ``probes`` of the key's tasks at once."""
        return self.streak >= max(1, config.probes)

    def clear(self) -> None:
        self._entries.clear()
        self._bad = 0
        self.streak = 0
        self.streak_from = None
        self.error_types.clear()


def _remembered(outages: list[Outage], now: datetime) -> list[Outage]:
    kept = [o for o in outages if o.end is None or o.end > now - OUTAGE_MEMORY]
    return kept[-MAX_REMEMBERED:]


def trip(
    control: Control,
    now: datetime,
    config: Breaker,
    *,
    started: datetime,
    error_types: list[str],
    error_type: str | None,
    error_message: str | None,
    sample_task: str | None,
) -> Control:
    """Open a closed breaker: its key's tasks are held for ``config.cooldown`` seconds. The
    outage is taken to have begun at ``started`` (the oldest failure of the window)."""
    before = breaker_of(control)
    outages = list(before.outages)
    if outages and outages[-1].end is None:
        last = outages[-1]
        outages[-1] = msgspec.structs.replace(
            last, error_types=sorted(set(last.error_types) | set(error_types))
        )
    else:
        outages.append(Outage(start=min(started, now), error_types=sorted(error_types)))
    breaker = BreakerState(
        state=State.OPEN,
        since=now,
        until=now + timedelta(seconds=config.cooldown),
        cooldown=config.cooldown,
        trips=1,
        error_type=error_type,
        error_message=error_message,
        sample_task=sample_task,
        outages=_remembered(outages, now),
    )
    return compose(with_breaker(control, breaker, gate=0), None)


def widen(control: Control, started: datetime, error_types: list[str]) -> Control | None:
    """The outage in progress as another worker saw it: it began no later than ``started``
    (that worker's oldest failure of it) with ``error_types`` among its errors. Failures
    before the trip that happened on other workers are then inside the window, uncharged like
    the rest. ``None``: nothing to widen (no outage in progress, or it already covers both)."""
    breaker = breaker_of(control)
    if not breaker.outages or breaker.outages[-1].end is not None:
        return None
    last = breaker.outages[-1]
    types = sorted(set(last.error_types) | set(error_types))
    if last.start <= started and types == list(last.error_types):
        return None
    outages = [*breaker.outages[:-1], Outage(start=min(last.start, started), error_types=types)]
    return with_breaker(control, msgspec.structs.replace(breaker, outages=outages))


def begin_probing(control: Control, now: datetime, config: Breaker) -> Control | None:
    """An open breaker whose cool-down has passed lets ``config.probes`` claims through
    (``None``: it is not time yet, or it is not open)."""
    breaker = breaker_of(control)
    if breaker.state is not State.OPEN or breaker.by is not None:
        return None
    if breaker.until is not None and breaker.until > now:
        return None
    half = msgspec.structs.replace(breaker, state=State.HALF_OPEN, since=now, until=None)
    return with_breaker(control, half, gate=config.probes)


def probe_window(config: Breaker) -> float:
    """Seconds a half-open breaker waits for one of its probes to come back before it lets
    ``probes`` more through (a probe whose worker died, or that was handed back unrun, must
    not keep the key held for ever): the longest cool-down."""
    return max(config.cooldown, config.max_cooldown)


def reprobe(control: Control, now: datetime, config: Breaker) -> Control | None:
    """A half-open breaker none of whose probes came back within :func:`probe_window`: a new
    half-open window with ``config.probes`` more (``None``: not half-open, or not yet)."""
    breaker = breaker_of(control)
    if breaker.state is not State.HALF_OPEN or breaker.by is not None or breaker.since is None:
        return None
    if (now - breaker.since).total_seconds() < probe_window(config):
        return None
    renewed = msgspec.structs.replace(breaker, since=now)
    return with_breaker(control, renewed, gate=config.probes)


def reopen(control: Control, now: datetime, config: Breaker, error_types: list[str]) -> Control:
    """A probe failed: open again, for twice the last cool-down (at most the cap)."""
    breaker = breaker_of(control)
    cooldown = min(config.max_cooldown, max(config.cooldown, breaker.cooldown * 2))
    outages = list(breaker.outages)
    if outages and outages[-1].end is None:
        last = outages[-1]
        outages[-1] = msgspec.structs.replace(
            last, error_types=sorted(set(last.error_types) | set(error_types))
        )
    opened = msgspec.structs.replace(
        breaker,
        state=State.OPEN,
        since=now,
        until=now + timedelta(seconds=cooldown),
        cooldown=cooldown,
        trips=breaker.trips + 1,
        outages=_remembered(outages, now),
    )
    return with_breaker(control, opened, gate=0)


def close(control: Control, now: datetime, config: Breaker) -> Control:
    """A probe succeeded (or an operator closed it): the outage is over; the key's held
    tasks are let go at a rising rate (see :func:`ramp`)."""
    breaker = breaker_of(control)
    outages = list(breaker.outages)
    if outages and outages[-1].end is None:
        outages[-1] = msgspec.structs.replace(outages[-1], end=now)
    rate = max(1, config.probes) if config.ramp > 0 else None
    closed = BreakerState(
        state=State.CLOSED,
        since=now,
        ramp_from=now if rate is not None else None,
        ramp_rate=rate,
        outages=_remembered(outages, now),
    )
    return compose(with_breaker(control, closed, gate=None), rate)


def ramp(control: Control, now: datetime, config: Breaker) -> Control | None:
    """The next step of a ramp in progress (``None``: nothing to change): the rate doubles
    every fifth of ``config.ramp``; once ``config.ramp`` has passed, the limit is lifted."""
    breaker = breaker_of(control)
    if breaker.state is not State.CLOSED or breaker.ramp_from is None or breaker.by is not None:
        return None
    elapsed = (now - breaker.ramp_from).total_seconds()
    if elapsed >= config.ramp:
        done = msgspec.structs.replace(breaker, ramp_from=None, ramp_rate=None)
        return compose(with_breaker(control, done), None)
    step = int(elapsed // (config.ramp / 5))
    rate = max(1, config.probes) * 2**step
    if ramp_rate_of(control) == rate:
        return None
    return compose(with_breaker(control, msgspec.structs.replace(breaker, ramp_rate=rate)), rate)


def force_open(control: Control, now: datetime, by: str, reason: str | None) -> Control:
    """An operator holds the key's tasks until they close the breaker by hand."""
    breaker = breaker_of(control)
    outages = list(breaker.outages)
    if not outages or outages[-1].end is not None:
        outages.append(Outage(start=now))
    forced = BreakerState(
        state=State.OPEN,
        since=now,
        until=None,
        cooldown=breaker.cooldown,
        trips=breaker.trips,
        by=by,
        reason=reason,
        outages=_remembered(outages, now),
    )
    return compose(with_breaker(control, forced, gate=0), None)
