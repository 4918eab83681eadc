"""What a task's own attempts say about its key's dependency, where a window of outcomes
cannot tell: the outage of a quiet queue, whose tasks use up their attempts before any
window fills (:func:`own_outage`), and when an outage has held a task long enough
(:func:`held_too_long`).

Pure functions over the task's attempts since its last redrive (``attempt_count`` of them),
times in the store's clock.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from rdq.flow._breaker import Outage
from rdq.flow._breaker_config import Breaker
from rdq.spi import Attempt, Envelope, Outcome

HANDLER_TIMEOUT = "rdq.Timeout"
"""The error type of a handler that ran out of its own time: no evidence of an outage by
itself (a handler too slow for its timeout fails on its own; a client's own timeout,
``httpx.ReadTimeout`` say, is evidence)."""

__all__ = ["OUTAGE_TOO_LONG", "held_too_long", "own_outage"]

OUTAGE_TOO_LONG = "rdq.OutageTooLong"
"""The error type of a task dead-lettered by :func:`held_too_long`."""
_FAILED = (Outcome.FAILED, Outcome.TIMEOUT)
_NEUTRAL = (Outcome.DEFERRED, Outcome.INTERRUPTED, Outcome.LEASE_EXPIRED, Outcome.SNOOZED)
"""Attempts that say nothing of the dependency: held, interrupted, or lost with a worker."""


def _since_redrive(task: Envelope) -> list[Attempt]:
    count = task.attempt_count
    return list(task.attempts[-count:]) if count and task.attempts else []


def own_outage(
    task: Envelope,
    error_type: str | None,
    outage_types: Collection[str],
    last_success: datetime | None,
    outages: Sequence[Outage],
    now: datetime,
) -> datetime | None:
    """When the outage that ``task``'s own failures show began, or ``None`` when they show
    none. They show one when the task, failing now with the outage-class ``error_type``,
    failed every attempt since its last redrive with an outage-class error (its types among
    ``outage_types``, those seen on its key since its last success; the handler's own timeout
    is not one of them) — attempts held,
    interrupted or lost with a worker aside, and at least one before this one: a single
    failure is no evidence — and nothing says the key worked since the first of them: no
    success a worker saw (``last_success``), no outage of the key that ended. It began at the
    first of those failures."""
    if error_type == HANDLER_TIMEOUT:
        return None
    types = {*outage_types, error_type} - {HANDLER_TIMEOUT}
    first = now
    failures = 0
    for attempt in _since_redrive(task):
        if attempt.outcome in _FAILED:
            if attempt.error_type not in types:
                return None
            failures += 1
            if attempt.finished_at is not None and attempt.finished_at < first:
                first = attempt.finished_at
        elif attempt.outcome not in _NEUTRAL:
            return None
    if not failures:
        return None
    if last_success is not None and last_success >= first:
        return None
    if any(o.end is not None and o.end >= first for o in outages):
        return None
    return first


def held_too_long(
    task: Envelope, max_attempts: int, config: Breaker, now: datetime
) -> float | None:
    """Seconds since ``task``'s first failure since its last redrive, when an outage holds
    it (it fails now, outage-class, while its breaker is not closed) that long after it would
    have used up its ``max_attempts`` without the outage: more than ``config.max_hold``.
    ``None``: it is held on."""
    failures = [a for a in _since_redrive(task) if a.outcome in _FAILED]
    if len(failures) + 1 < max_attempts:
        return None
    started = [a.finished_at for a in failures if a.finished_at is not None]
    if not started:
        return None
    age = (now - min(started)).total_seconds()
    return age if age > config.max_hold else None
