"""What an attempt comes to: the action on the task and what its attempt record says.

A leaf module: the classification, the exhaustion rules and the worker all speak in
:class:`Decision`."""

from __future__ import annotations

import enum
from typing import NamedTuple

from rdq.spi import Outcome

__all__ = [
    "ATTEMPTS_EXHAUSTED",
    "CORRUPT_TASK",
    "HANDLER_IMPORT_ERROR",
    "INTERRUPTED_ERROR",
    "PAYLOAD_KEY_UNAVAILABLE",
    "SNOOZE",
    "SNOOZED_TOO_OFTEN",
    "SUCCESS",
    "TIMEOUT_ERROR",
    "UNDECODABLE_PAYLOAD",
    "UNKNOWN_HANDLER",
    "Action",
    "Decision",
]

UNKNOWN_HANDLER = "rdq.UnknownHandler"
UNDECODABLE_PAYLOAD = "rdq.UndecodablePayload"
TIMEOUT_ERROR = "rdq.Timeout"
ATTEMPTS_EXHAUSTED = "rdq.AttemptsExhausted"
INTERRUPTED_ERROR = "rdq.Interrupted"
CORRUPT_TASK = "rdq.CorruptTask"
HANDLER_IMPORT_ERROR = "rdq.HandlerImportError"
PAYLOAD_KEY_UNAVAILABLE = "rdq.PayloadKeyUnavailable"
SNOOZE = "rdq.Snooze"
SNOOZED_TOO_OFTEN = "rdq.SnoozedTooOften"


class Action(enum.Enum):
    COMPLETE = "complete"
    RESCHEDULE = "reschedule"
    DEAD_LETTER = "dead_letter"


class Decision(NamedTuple):
    """What to do with a task after an attempt, and what the attempt record says."""

    action: Action
    outcome: Outcome
    delay: float = 0.0
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    outage: bool = False
    """The failure is outage-class (see :mod:`rdq.retry._outage`): it feeds the breaker."""
    retry_after: float | None = None
    """Seconds the handler asked to wait with ``rdq.RetryAfter`` (it lowers an adaptive rate
    limit of the task's keys for that long, see :func:`rdq.flow.lower`)."""


SUCCESS = Decision(Action.COMPLETE, Outcome.SUCCEEDED)
