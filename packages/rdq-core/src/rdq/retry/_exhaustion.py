"""Which attempts count, and the decisions made before a handler runs: attempts exhausted, a
task that does not decode, a handler nobody serves, a task claimed ahead of a shutdown, a
sealed payload this worker cannot open.

:func:`attempts_used` counts the attempts since the last redrive minus those that use up
none: INTERRUPTED (a graceful shutdown), DEFERRED (held while its dependency was down),
SNOOZED (the handler said "not yet"; :func:`bound_snoozes` keeps that finite), and
a failure with one of an outage's error types while the outage lasted (an outage of the
task's breaker key, as the breaker remembers it)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from rdq.config import QueueConfig
from rdq.retry._decision import (
    ATTEMPTS_EXHAUSTED,
    CORRUPT_TASK,
    INTERRUPTED_ERROR,
    PAYLOAD_KEY_UNAVAILABLE,
    SNOOZED_TOO_OFTEN,
    UNKNOWN_HANDLER,
    Action,
    Decision,
)
from rdq.spi import Attempt, Envelope, Outcome

__all__ = [
    "INTERRUPTED_UNSTARTED",
    "KEY_WAIT_CAP",
    "KEY_WAIT_FIRST",
    "UNCHARGED_OUTCOMES",
    "OutageWindow",
    "attempts_used",
    "bound_snoozes",
    "corrupt",
    "exhausted",
    "payload_unreadable",
    "uncharged",
    "unknown_handler",
]

UNCHARGED_OUTCOMES = frozenset({Outcome.INTERRUPTED, Outcome.DEFERRED, Outcome.SNOOZED})
"""Outcomes of attempts that do not use up one of the task's ``max_attempts``."""

INTERRUPTED_UNSTARTED = Decision(
    Action.RESCHEDULE,
    Outcome.INTERRUPTED,
    0.0,
    INTERRUPTED_ERROR,
    "the worker shut down before the handler started (the task was claimed ahead)",
)


class OutageWindow(Protocol):
    """An outage of a key: from ``start`` to ``end`` (``None`` while it lasts), with the error
    types of the failures that made it (``rdq.flow.Outage`` is one)."""

    @property
    def start(self) -> datetime: ...
    @property
    def end(self) -> datetime | None: ...
    @property
    def error_types(self) -> Sequence[str]: ...


def attempts_used(task: Envelope, number: int, outages: Sequence[OutageWindow] = ()) -> int:
    """How many of its attempts a task has used once attempt ``number`` (the task's
    ``attempt_count + 1``) runs: ``number`` minus the uncharged attempts since the last
    redrive."""
    return number - uncharged(task, outages)


def uncharged(task: Envelope, outages: Sequence[OutageWindow] = ()) -> int:
    """How many of the task's attempts since its last redrive use up none of its attempts."""
    count = task.attempt_count
    if not count or not task.attempts:
        return 0
    return sum(1 for attempt in task.attempts[-count:] if _free(attempt, outages))


def _free(attempt: Attempt, outages: Sequence[OutageWindow]) -> bool:
    if attempt.outcome in UNCHARGED_OUTCOMES:
        return True
    if attempt.outcome not in (Outcome.FAILED, Outcome.TIMEOUT) or attempt.finished_at is None:
        return False
    at = attempt.finished_at
    return any(
        o.start <= at and (o.end is None or at <= o.end) and attempt.error_type in o.error_types
        for o in outages
    )


def exhausted(task: Envelope, used: int, config: QueueConfig) -> Decision | None:
    """Dead-letter the task unless attempt ``used`` is within ``config.max_attempts``."""
    if used <= config.max_attempts:
        return None
    return Decision(
        Action.DEAD_LETTER,
        Outcome.PERMANENT,
        0.0,
        ATTEMPTS_EXHAUSTED,
        f"{used - 1} attempts used (last: {_last_outcome(task)}) before this claim; "
        f"max_attempts is {config.max_attempts}",
    )


def corrupt(task: Envelope) -> Decision:
    """A stored task that does not decode: dead-lettered, never run."""
    return Decision(
        Action.DEAD_LETTER,
        Outcome.PERMANENT,
        0.0,
        CORRUPT_TASK,
        f"the stored task does not decode: {task.corrupt}",
    )


def unknown_handler(task: Envelope) -> Decision:
    """A task whose ``handler_ref`` this worker cannot resolve: dead-lettered."""
    return Decision(
        Action.DEAD_LETTER,
        Outcome.PERMANENT,
        0.0,
        UNKNOWN_HANDLER,
        f"no handler for {task.handler_ref!r} (not registered, no invoker for its "
        "scheme, not an allowed import path)",
    )


KEY_WAIT_FIRST = 15.0
KEY_WAIT_CAP = 900.0
"""Seconds a task whose payload this worker cannot open waits before it is claimed again:
doubling from the first with each such attempt in a row, up to the cap."""


def payload_unreadable(task: Envelope, reason: str) -> Decision:
    """A sealed payload this worker cannot open (its key is missing or wrong): the task waits
    for a worker that holds the key — DEFERRED, so it uses up none of its attempts and is
    never dead-lettered for it; the attempt record says why, in clear words."""
    in_a_row = 0
    for attempt in reversed(task.attempts):
        if attempt.error_type != PAYLOAD_KEY_UNAVAILABLE:
            break
        in_a_row += 1
    delay = min(KEY_WAIT_CAP, KEY_WAIT_FIRST * 2 ** min(in_a_row, 16))
    return Decision(
        Action.RESCHEDULE,
        Outcome.DEFERRED,
        delay,
        PAYLOAD_KEY_UNAVAILABLE,
        f"{reason}; the task waits (uncharged) for a worker that holds the key, "
        f"next try in {delay:g}s",
    )


def _last_outcome(task: Envelope) -> str:
    return task.attempts[-1].outcome.value if task.attempts else "unknown"


def bound_snoozes(task: Envelope, decision: Decision, config: QueueConfig) -> Decision:
    """``decision``, unless it snoozes ``task`` once more than ``config.max_snoozes`` allows
    since its last redrive: then the task goes to the DLQ saying so."""
    if decision.outcome is not Outcome.SNOOZED:
        return decision
    count = task.attempt_count
    earlier = task.attempts[-count:] if count and task.attempts else []
    snoozes = 1 + sum(1 for a in earlier if a.outcome is Outcome.SNOOZED)
    if snoozes <= config.max_snoozes:
        return decision
    return Decision(
        Action.DEAD_LETTER,
        Outcome.SNOOZED,
        0.0,
        SNOOZED_TOO_OFTEN,
        f"snoozed {snoozes} times, more than max_snoozes ({config.max_snoozes}); last: "
        f"{decision.error_type}: {decision.error_message}",
        decision.traceback,
    )
