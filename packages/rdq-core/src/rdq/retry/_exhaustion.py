"""Which attempts count, and the decisions made before a handler runs: attempts exhausted, a
task that does not decode, a handler nobody serves, a task claimed ahead of a shutdown.

An attempt that ended INTERRUPTED (a graceful shutdown) does not use up one of the task's
attempts: :func:`attempts_used` counts the attempts since the last redrive minus those."""

from __future__ import annotations

from rdq.config import QueueConfig
from rdq.retry._decision import (
    ATTEMPTS_EXHAUSTED,
    CORRUPT_TASK,
    INTERRUPTED_ERROR,
    UNKNOWN_HANDLER,
    Action,
    Decision,
)
from rdq.spi import Envelope, Outcome

__all__ = [
    "INTERRUPTED_UNSTARTED",
    "UNCHARGED_OUTCOMES",
    "attempts_used",
    "corrupt",
    "exhausted",
    "unknown_handler",
]

UNCHARGED_OUTCOMES = frozenset({Outcome.INTERRUPTED})
"""Outcomes of attempts that do not use up one of the task's ``max_attempts``."""

INTERRUPTED_UNSTARTED = Decision(
    Action.RESCHEDULE,
    Outcome.INTERRUPTED,
    0.0,
    INTERRUPTED_ERROR,
    "the worker shut down before the handler started (the task was claimed ahead)",
)


def attempts_used(task: Envelope, number: int) -> int:
    """How many of its attempts a task has used once attempt ``number`` (the task's
    ``attempt_count + 1``) runs: ``number`` minus the uncharged attempts since the last
    redrive."""
    return number - _uncharged_since_redrive(task)


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


def _uncharged_since_redrive(task: Envelope) -> int:
    count = task.attempt_count
    if not count or not task.attempts:
        return 0
    recent = task.attempts[-count:]
    return sum(1 for a in recent if a.outcome in UNCHARGED_OUTCOMES)


def _last_outcome(task: Envelope) -> str:
    return task.attempts[-1].outcome.value if task.attempts else "unknown"
