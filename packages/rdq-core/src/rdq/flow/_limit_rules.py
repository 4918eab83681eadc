"""The rules of declared limits, as pure functions over a key's control record (stored by
compare-and-set, like the breaker's):

- :func:`declare` writes what the app declares for a key — unless the record already holds
  the same, or a declaration read later than this one (``declared_at``): of two workers whose
  apps disagree during a rolling deploy, the one (re)started last wins, and neither undoes
  the other at every refresh;
- :func:`undeclare` lifts a limit its app no longer declares (same rule);
- :func:`lower` halves a key's rate when a handler raised ``rdq.RetryAfter`` on one of its
  tasks, until the RetryAfter's delay has passed; a RetryAfter from a task claimed after the
  last halving (the halved rate still draws one) halves it again, one from a task claimed
  before only extends the time;
- :func:`restore` brings the declared rate back once that time has passed.

Each ends with :func:`rdq.flow.compose`: the fields the store enforces follow from the state.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec

from rdq.flow._breaker import ramp_rate_of
from rdq.flow._compose import (
    LIMIT_STATE,
    LOWERED_STATE,
    LimitState,
    Lowered,
    compose,
    limit_of,
    lowered_of,
    with_state,
)
from rdq.flow._limit_config import KeyedLimit
from rdq.spi import Control

__all__ = ["EXTEND_STEP", "declare", "lower", "restore", "state_of", "undeclare"]

EXTEND_STEP = timedelta(seconds=1)
"""A RetryAfter that would keep a lowered rate for less than this much longer than it is kept
already changes nothing (so a burst of them is one write, not one each)."""
MAX_PER = 86_400.0


def state_of(spec: KeyedLimit, declared_at: datetime | None, by: str) -> LimitState:
    """What a control record keeps of ``spec``."""
    return LimitState(
        name=spec.name,
        per_value=spec.per_value,
        concurrency=spec.concurrency,
        rate=spec.rate,
        per=spec.per,
        burst=spec.burst,
        adaptive=spec.adaptive,
        sources=list(spec.sources),
        declared_at=declared_at,
        by=by,
    )


def _newer(stored: datetime | None, mine: datetime | None) -> bool:
    """True when a declaration read at ``stored`` is later than one read at ``mine``."""
    return stored is not None and (mine is None or stored > mine)


def declare(
    control: Control, spec: KeyedLimit, declared_at: datetime | None, by: str
) -> Control | None:
    """``control`` holding ``spec`` (``None``: it holds the same already, or a later
    declaration)."""
    wanted = state_of(spec, declared_at, by)
    stored = limit_of(control)
    if stored is not None and (stored.same(wanted) or _newer(stored.declared_at, declared_at)):
        return None
    changed = with_state(control, LIMIT_STATE, wanted)
    if wanted.rate is None or not wanted.adaptive:
        changed = with_state(changed, LOWERED_STATE, None)
    return compose(changed, ramp_rate_of(control))


def undeclare(control: Control, declared_at: datetime | None) -> Control | None:
    """``control`` without its declared limits (``None``: it holds none, or a declaration
    read later than ``declared_at``)."""
    stored = limit_of(control)
    if stored is None or _newer(stored.declared_at, declared_at):
        return None
    changed = with_state(with_state(control, LIMIT_STATE, None), LOWERED_STATE, None)
    return compose(changed, ramp_rate_of(control))


def lower(
    control: Control,
    now: datetime,
    delay: float,
    claimed_at: datetime | None,
    error: str | None,
) -> Control | None:
    """A handler raised ``RetryAfter(delay)`` on a task with ``control``'s key, claimed at
    ``claimed_at``: the key's rate halved until ``now + delay`` (``None``: nothing to
    change — no adaptive rate declared, or the lowered rate already covers it)."""
    spec = limit_of(control)
    if spec is None or spec.rate is None or not spec.adaptive or not delay > 0:
        return None
    until = now + timedelta(seconds=delay)
    lowered = lowered_of(control)
    if lowered is None or lowered.until <= now:
        rate, per = _halved(spec.rate, spec.per)
        new = Lowered(rate=rate, per=per, since=now, until=until, error=error)
    elif (
        claimed_at is not None
        and claimed_at >= lowered.since
        and _halved(lowered.rate, lowered.per) != (lowered.rate, lowered.per)
    ):
        rate, per = _halved(lowered.rate, lowered.per)
        new = Lowered(
            rate=rate,
            per=per,
            since=now,
            until=max(lowered.until, until),
            halvings=lowered.halvings + 1,
            error=error,
        )
    elif until > lowered.until + EXTEND_STEP:
        new = msgspec.structs.replace(lowered, until=until)
    else:
        return None
    return compose(with_state(control, LOWERED_STATE, new), ramp_rate_of(control))


def _halved(rate: int, per: float) -> tuple[int, float]:
    """Half the rate: half as many claims per period, or, below 2, twice the period."""
    if rate >= 2:
        return rate // 2, per
    return rate, min(MAX_PER, per * 2)


def restore(control: Control, now: datetime) -> Control | None:
    """The declared rate back once the lowered one's time has passed (``None``: not yet, or
    nothing lowered)."""
    lowered = lowered_of(control)
    if lowered is None or lowered.until > now:
        return None
    return compose(with_state(control, LOWERED_STATE, None), ramp_rate_of(control))
