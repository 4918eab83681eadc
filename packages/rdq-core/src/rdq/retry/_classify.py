"""Outcome classification: what a handler's return or exception means for its task.

returns                              → SUCCEEDED, complete
raises rdq.Permanent / non_retryable → PERMANENT, dead-letter at once
raises rdq.RetryAfter(delay)         → FAILED, retry after ``delay``
raises rdq.Snooze(delay)             → SNOOZED, run again after ``delay``, no attempt used
  (also an HTTP error with a ``Retry-After`` on a queue with ``snooze_retry_after``)
raises an error whose response has a → FAILED, retry no sooner than it (nor the backoff)
  ``Retry-After`` (see _status)
exceeds its timeout                  → TIMEOUT, retry after backoff
raises anything else                 → FAILED, retry after backoff
a retry when attempts are exhausted  → dead-letter (the attempt keeps its outcome)

Every text a decision carries is bounded by the contract's limits
(:data:`~rdq.spi.bounds.MAX_ERROR_TYPE_LENGTH`, ``MAX_ERROR_MESSAGE_LENGTH``,
``MAX_TRACEBACK_LENGTH``), so no attempt the engine writes is refused for its size.
"""

from __future__ import annotations

import random

from rdq.config import QueueConfig
from rdq.retry import _tracebacks
from rdq.retry._backoff import backoff_delay
from rdq.retry._decision import HANDLER_IMPORT_ERROR, SNOOZE, TIMEOUT_ERROR, Action, Decision
from rdq.retry._outage import is_outage
from rdq.retry._status import status_failure
from rdq.signals import MAX_RETRY_DELAY, Permanent, RetryAfter, Snooze
from rdq.spi import Outcome, bounds

__all__ = [
    "MAX_DELAY",
    "MAX_ERROR_MESSAGE",
    "classify_error",
    "classify_import_error",
    "classify_timeout",
    "describe",
    "error_type_name",
    "timeout_message",
    "truncate_message",
]

MAX_ERROR_MESSAGE = bounds.MAX_ERROR_MESSAGE_LENGTH
"""Error messages are cut to this many characters before they are stored."""

MAX_DELAY = MAX_RETRY_DELAY
"""No retry is scheduled further out than this (seconds), whatever a policy or handler asks."""


def error_type_name(exc_type: type[BaseException]) -> str:
    """The qualified name of an exception type (``ValueError``, ``myapp.errors.Bad``)."""
    module = exc_type.__module__
    if module == "builtins":
        return truncate_message(exc_type.__qualname__, bounds.MAX_ERROR_TYPE_LENGTH)
    if module == "rdq.signals":  # the public name: rdq.Permanent, rdq.RetryAfter
        module = "rdq"
    return truncate_message(f"{module}.{exc_type.__qualname__}", bounds.MAX_ERROR_TYPE_LENGTH)


def truncate_message(message: str, limit: int = MAX_ERROR_MESSAGE) -> str:
    """``message`` cut to at most ``limit`` characters, marked with an ellipsis when cut."""
    return _tracebacks.bound_head(message, limit)


def describe(exc: BaseException) -> str:
    """A one-line-ish description of ``exc`` for the attempt record, bounded in length."""
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not break classification
        text = f"<unprintable {type(exc).__name__}>"
    return truncate_message(text or type(exc).__name__)


def timeout_message(config: QueueConfig) -> str:
    return f"handler exceeded its timeout of {config.timeout:g}s"


def classify_timeout(
    where: str | None, attempt: int, config: QueueConfig, *, rng: random.Random | None = None
) -> Decision:
    """A handler that ran out of time; ``where`` is where it was when its time ran out."""
    return _retry(
        Outcome.TIMEOUT,
        TIMEOUT_ERROR,
        timeout_message(config),
        attempt,
        config,
        None,
        rng,
        where,
        outage=True,
    )


def classify_error(
    exc: BaseException,
    attempt: int,
    config: QueueConfig,
    *,
    timed_out: bool = False,
    rng: random.Random | None = None,
) -> Decision:
    """Classify a failed attempt number ``attempt`` (1-based) under ``config``; the decision
    carries the formatted traceback of ``exc``."""
    if timed_out:
        return classify_timeout(None, attempt, config, rng=rng)
    trace = _tracebacks.format_failure(exc)
    if isinstance(exc, Permanent):
        cause = exc.__cause__
        type_name = error_type_name(type(cause) if cause is not None else type(exc))
        return Decision(Action.DEAD_LETTER, Outcome.PERMANENT, 0.0, type_name, describe(exc), trace)
    if isinstance(exc, Snooze):
        return _snoozed(exc.delay.total_seconds(), SNOOZE, describe(exc))
    if config.non_retryable and isinstance(exc, config.non_retryable):
        return Decision(
            Action.DEAD_LETTER,
            Outcome.PERMANENT,
            0.0,
            error_type_name(type(exc)),
            describe(exc),
            trace,
        )
    retry_after = exc.delay.total_seconds() if isinstance(exc, RetryAfter) else None
    delay = retry_after
    status = status_failure(exc)
    if status is not None and status.retry_after is not None and config.snooze_retry_after:
        return _snoozed(status.retry_after, error_type_name(type(exc)), describe(exc), trace)
    if status is not None and status.retry_after is not None:
        # the response said when to come back: not before it (nor before the backoff)
        retry_after = status.retry_after
        delay = max(retry_after, backoff_delay(config.backoff, attempt, rng))
    return _retry(
        Outcome.FAILED,
        error_type_name(type(exc)),
        describe(exc),
        attempt,
        config,
        delay,
        rng,
        trace,
        outage=is_outage(exc, config.outage_errors),
        retry_after=retry_after,
    )


def classify_import_error(
    exc: BaseException, attempt: int, config: QueueConfig, *, rng: random.Random | None = None
) -> Decision:
    """A handler module that would not import: a retryable failure (the next attempt imports
    it again; it may be a deploy in progress or a transient error at import time)."""
    cause = exc.__cause__ or exc
    return _retry(
        Outcome.FAILED,
        HANDLER_IMPORT_ERROR,
        describe(exc),
        attempt,
        config,
        None,
        rng,
        _tracebacks.format_failure(cause),
    )


def _retry(
    outcome: Outcome,
    error_type: str,
    message: str,
    attempt: int,
    config: QueueConfig,
    delay: float | None,
    rng: random.Random | None,
    trace: str | None = None,
    *,
    outage: bool = False,
    retry_after: float | None = None,
) -> Decision:
    if attempt >= config.max_attempts:
        return Decision(
            Action.DEAD_LETTER, outcome, 0.0, error_type, message, trace, outage, retry_after
        )
    if delay is None:
        delay = backoff_delay(config.backoff, attempt, rng)
    capped = min(delay, MAX_DELAY)
    return Decision(
        Action.RESCHEDULE, outcome, capped, error_type, message, trace, outage, retry_after
    )


def _snoozed(delay: float, error_type: str, message: str, trace: str | None = None) -> Decision:
    """Run the task again after ``delay`` seconds, using up no attempt (a queue's
    ``max_snoozes`` bounds how often: :func:`rdq.retry.bound_snoozes`)."""
    capped = min(delay, MAX_DELAY)
    return Decision(
        Action.RESCHEDULE, Outcome.SNOOZED, capped, error_type, message, trace, retry_after=None
    )
