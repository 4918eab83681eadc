"""Exceptions a handler raises to steer its task's outcome (see :mod:`rdq.retry`).

Any other exception is a retryable failure; returning normally is success.
"""

from __future__ import annotations

from datetime import timedelta

__all__ = ["Permanent", "RetryAfter", "Snooze", "Unavailable"]

MAX_RETRY_DELAY = 366 * 86400.0
"""Seconds: the longest delay a retry can be scheduled out."""


class Permanent(Exception):
    """Raise from a handler to dead-letter the task at once: retrying cannot help.

    ``raise rdq.Permanent("customer 42 does not exist")``, or ``raise Permanent(...) from exc``
    to keep the cause's type: the attempt records the cause's type when there is one."""


class RetryAfter(Exception):
    """Raise from a handler to retry after ``delay`` instead of the backoff policy's delay.

    It is an outage-class failure (the dependency said "not now"): it counts toward the
    breaker of the task's key (see :class:`rdq.Breaker`), and while that breaker is open the
    task is held without using up an attempt; otherwise the attempt counts toward
    ``max_attempts``."""

    def __init__(self, delay: float | timedelta, message: str | None = None) -> None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        if not seconds >= 0:  # negative or NaN
            raise ValueError("RetryAfter delay must not be negative")
        # no retry is scheduled more than a year out (and no timestamp can overflow)
        self.delay = timedelta(seconds=min(seconds, MAX_RETRY_DELAY))
        super().__init__(message or f"retry after {seconds:g}s")


class Unavailable(Exception):
    """Raise from a handler when the service it calls is down (whatever the exception the
    client library gave): an outage-class failure, like a refused connection. It counts
    toward the breaker of the task's key, and a task that fails so during an outage of its
    dependency is rescheduled without using up an attempt (see :class:`rdq.Breaker`).

    ``raise rdq.Unavailable("payment provider answered 503") from exc``."""


class Snooze(Exception):
    """Raise from a handler when the task cannot be done *yet* (a resource not ready, a 429
    that is no outage): it runs again after ``delay`` without using up an attempt, and its
    attempt is recorded as ``SNOOZED``. It says nothing of the task's dependency (it never
    counts toward a breaker). A queue's ``max_snoozes`` bounds how often one task may snooze:
    past it, the task goes to the DLQ (``rdq.SnoozedTooOften``) rather than snooze for ever.

    ``raise rdq.Snooze(30, "the export is not ready")``, or ``ctx.snooze(30)``."""

    def __init__(self, delay: float | timedelta, reason: str | None = None) -> None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        if not seconds >= 0:  # negative or NaN
            raise ValueError("Snooze delay must not be negative")
        self.delay = timedelta(seconds=min(seconds, MAX_RETRY_DELAY))
        self.reason = reason
        super().__init__(reason or f"snoozed for {seconds:g}s")
