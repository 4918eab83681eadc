"""The settings of a queue: :class:`QueueConfig` and the policies it holds (:class:`Backoff`;
the breaker's and the limits' settings are :mod:`rdq.flow`'s), each able to check itself
(``validate`` raises :class:`~rdq.errors.ConfigError` naming the key).

These are the values the engine reads at claim time; where they come from (code, a mapping or
a TOML file) is :mod:`rdq.config`, which re-exports them and is where users import them from.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

from rdq._checks import is_int, is_number
from rdq.errors import ConfigError
from rdq.flow import Breaker, Limit, check_dependency, check_limits
from rdq.scrub import Scrubber
from rdq.spi import MAX_PRIORITY, MIN_PRIORITY, bounds

__all__ = ["MAX_SNOOZES", "Backoff", "BackoffKind", "QueueConfig"]

MAX_SNOOZES = 100_000
"""The most a queue's ``max_snoozes`` may be."""


class BackoffKind(enum.StrEnum):
    """How the delay before the next attempt grows."""

    EXPONENTIAL = "exponential"
    """``uniform(0, min(cap, base * 2**(n-1)))``: exponential with full jitter."""
    FIXED = "fixed"
    """Always ``base``."""
    LINEAR = "linear"
    """``min(cap, base * n)``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """A backoff policy. Build one with :meth:`exponential`, :meth:`fixed` or :meth:`linear`."""

    kind: BackoffKind = BackoffKind.EXPONENTIAL
    base: float = 1.0
    cap: float = 300.0

    @classmethod
    def exponential(cls, base: float = 1.0, cap: float = 300.0) -> Backoff:
        """Exponential growth from ``base`` seconds, capped at ``cap``, with full jitter."""
        return cls(BackoffKind.EXPONENTIAL, float(base), float(cap))

    @classmethod
    def fixed(cls, delay: float) -> Backoff:
        """The same ``delay`` seconds before every retry."""
        return cls(BackoffKind.FIXED, float(delay), float(delay))

    @classmethod
    def linear(cls, base: float = 1.0, cap: float = 300.0) -> Backoff:
        """``base * n`` seconds before retry ``n``, capped at ``cap``."""
        return cls(BackoffKind.LINEAR, float(base), float(cap))


@dataclasses.dataclass(frozen=True, slots=True)
class QueueConfig:
    """How a queue's tasks are run and retried. Durations are seconds.

    ``max_attempts`` counts every attempt (the first one included); ``timeout`` bounds one
    handler call; ``lease`` is the claim lease the worker heartbeats while a handler runs;
    ``concurrency`` bounds the handlers one worker runs at once for this queue; ``task_ttl``
    is how long succeeded tasks are kept (``dead_ttl`` dead ones: for ever unless set);
    ``non_retryable`` lists exception types that dead-letter a task at once; ``priority`` is
    the default priority of its tasks."""

    max_attempts: int = 5
    backoff: Backoff = Backoff()
    timeout: float = 60.0
    lease: float = 30.0
    concurrency: int = 10
    task_ttl: float = 7 * 86400.0
    non_retryable: tuple[type[BaseException], ...] = ()
    priority: int = 0
    """The priority of tasks submitted to this queue without one (``rdq.spi.MIN_PRIORITY``
    to ``MAX_PRIORITY``; higher is claimed first). Applied when a task is submitted."""
    breaker: Breaker = dataclasses.field(default_factory=Breaker)
    """When a failing dependency's tasks are held instead of retried (on by default)."""
    dependency: str | None = None
    """The service every handler of the queue calls (a handler may name its own): their
    breaker trips together. ``None``: each handler has a breaker of its own."""
    outage_errors: tuple[type[BaseException], ...] = ()
    """Exception types that mean "the dependency is down", beyond the built-in ones."""
    limits: tuple[Limit, ...] = ()
    """Concurrency and rate limits of the queue's tasks that hold across the fleet (see
    :mod:`rdq.flow`); a queue's only, never the defaults'."""
    fair: str | None = None
    """Share the queue's claims among the groups of its tasks: a task's group is its first key
    that starts with this prefix (``"tenant:"``: ``tenant:acme``), the tasks without one are a
    group of their own. ``""``: declared not fair; ``None``: not declared here (what the store
    holds stands). Written to the store by the workers that serve the queue (capability
    ``fair_shares``)."""
    priority_aging: float | None = None
    """Seconds of waiting worth one step of priority, so that no priority waits for ever
    behind a stream of higher ones. ``0``: declared strict; ``None``: not declared here (the
    default order is strict). Written to the store like ``fair`` (``priority_aging``)."""
    scrub: Scrubber = dataclasses.field(default_factory=Scrubber)
    """How the error messages and tracebacks of the queue's attempts are scrubbed before they
    are stored (see :mod:`rdq.scrub`; on by default)."""
    encrypt: bool | None = None
    """Seal the payloads of the queue's tasks (see :mod:`rdq.keys`). ``None`` (the default):
    when the submitting client has a keyring with an active key; ``True``: always (a submit
    without one is refused); ``False``: never."""
    max_snoozes: int = 100
    """How often one task may snooze (``rdq.Snooze``) since its last redrive before the next
    snooze sends it to the DLQ (``rdq.SnoozedTooOften``) instead: a task that is never ready
    is not rescheduled for ever. ``0``: a snooze always dead-letters."""
    snooze_retry_after: bool = False
    """A handler's HTTP error that carries a ``Retry-After`` (a 429 of a rate limit, a 503 of
    a service that says when to come back) snoozes the task for that long instead of failing
    it: no attempt used and no breaker fed. Off by default: such an error is outage-class and
    honours its ``Retry-After`` as a failure."""
    dead_ttl: float | None = None
    """Seconds a DEAD task is kept; past that, retention writes it to the archive and then
    removes it (see :mod:`rdq.retention`). ``None`` (the default): kept until an operator
    redrives or purges it."""
    archive_succeeded: bool = False
    """Archive SUCCEEDED and CANCELLED tasks too before ``task_ttl`` removes them (otherwise
    they are deleted without an archive, as they always were)."""
    keep_succeeded: bool = True
    """Keep a SUCCEEDED task (its status and attempt history) until ``task_ttl`` purges it.
    ``False``: the task is deleted as its success is recorded — in the same atomic, fenced
    step as the completion (a stale claim still changes nothing) — with what belongs to it
    (its dedup key, its hold on a payload blob): on PostgreSQL no second row version and
    index entries per task. Then an idempotent submit recognises the id only while the task
    lives (a resubmit of a completed id creates a new task), a dedup key with a window is
    free once its task completes, ``rdq tasks show`` answers not found, ``stats`` counts no
    succeeded tasks (rates over time still do: the per-minute counters) and
    ``archive_succeeded`` archives only CANCELLED ones; callbacks and metrics are unchanged.
    Failed, dead-lettered and cancelled tasks are kept as ever, and so is a schedule's tick
    (its id is what makes the tick run once). Needs a store with the capability
    ``discard_succeeded``: a worker serving such a queue on a store without it refuses to
    start (``Unsupported`` naming the queue and the setting). See docs/engine.md, "Not
    keeping succeeded tasks"."""

    def validate(self, queue: str) -> QueueConfig:
        """Return self if every setting is valid, else raise ``ConfigError`` naming the key."""
        prefix = f"queues.{queue}" if queue else "defaults"

        def bad(key: str, message: str) -> ConfigError:
            return ConfigError(
                f"{message} (queue {queue or '<defaults>'!r})", key=f"{prefix}.{key}"
            )

        if not is_int(self.max_attempts) or self.max_attempts < 1:
            raise bad("max_attempts", "must be an integer of at least 1")
        if not isinstance(self.backoff, Backoff):
            raise bad("backoff", "must be an rdq.Backoff")
        if not isinstance(self.backoff.kind, BackoffKind):
            raise bad("backoff", f"unknown backoff kind {self.backoff.kind!r}")
        for key, value in (("base", self.backoff.base), ("cap", self.backoff.cap)):
            if not is_number(value) or value < 0 or not math.isfinite(value):
                raise bad(key, "must be a finite number of seconds, not negative")
        if self.backoff.cap < self.backoff.base:
            raise bad("cap", "must not be smaller than base")
        for key, value in (("timeout", self.timeout), ("lease", self.lease)):
            if not is_number(value) or not 0 < value < math.inf:
                raise bad(key, "must be a positive number of seconds")
        if self.lease > bounds.MAX_LEASE.total_seconds():
            raise bad("lease", "must be at most 24 hours")
        if not is_int(self.concurrency) or not 1 <= self.concurrency <= bounds.MAX_LIMIT:
            raise bad("concurrency", f"must be an integer from 1 to {bounds.MAX_LIMIT}")
        if not is_number(self.task_ttl) or not self.task_ttl > 0:
            raise bad("task_ttl", "must be a positive number of seconds")
        if not is_int(self.priority) or not MIN_PRIORITY <= self.priority <= MAX_PRIORITY:
            raise bad("priority", f"must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}")
        if not is_int(self.max_snoozes) or not 0 <= self.max_snoozes <= MAX_SNOOZES:
            raise bad("max_snoozes", f"must be an integer from 0 to {MAX_SNOOZES}")
        if not isinstance(self.snooze_retry_after, bool):
            raise bad("snooze_retry_after", "must be true or false")
        for key, types in (
            ("non_retryable", self.non_retryable),
            ("outage_errors", self.outage_errors),
        ):
            for exc_type in types:
                if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
                    raise bad(key, f"{exc_type!r} is not an exception type")
        if not isinstance(self.breaker, Breaker):
            raise bad("breaker", "must be an rdq.Breaker")
        self.breaker.validate(f"{prefix}.breaker")
        check_dependency(self.dependency, f"{prefix}.dependency")
        check_limits(self.limits, f"{prefix}.limits")
        if self.limits and not queue:
            raise ConfigError("limits belong to a queue, not the defaults", key=f"{prefix}.limits")
        if self.fair is not None and (
            not isinstance(self.fair, str)
            or len(self.fair) > bounds.MAX_TASK_KEY_LENGTH
            or any(c.isspace() or not c.isprintable() for c in self.fair)
        ):
            raise bad(
                "fair",
                f"must be a key prefix of at most {bounds.MAX_TASK_KEY_LENGTH} characters "
                "without whitespace ('' for none)",
            )
        if self.dead_ttl is not None and (
            not is_number(self.dead_ttl) or not 0 < self.dead_ttl < math.inf
        ):
            raise bad("dead_ttl", "must be a positive number of seconds (none: keep)")
        if not isinstance(self.archive_succeeded, bool):
            raise bad("archive_succeeded", "must be true or false")
        if not isinstance(self.keep_succeeded, bool):
            raise bad("keep_succeeded", "must be true or false")
        if not isinstance(self.scrub, Scrubber):
            raise bad("scrub", "must be an rdq.Scrubber")
        self.scrub.validate(f"{prefix}.scrub")
        if self.encrypt is not None and not isinstance(self.encrypt, bool):
            raise bad("encrypt", "must be true, false or unset")
        aging = self.priority_aging
        if aging is not None and (not is_number(aging) or not 0 <= aging <= bounds.MAX_AGING):
            raise bad(
                "priority_aging", f"must be seconds from 0 to {bounds.MAX_AGING:g} (0: strict)"
            )
        return self

    @property
    def claim_order(self) -> tuple[str | None, float | None] | None:
        """What the queue's config declares its claims' order to be, as the store keeps it
        (``Control.fair``, ``Control.aging``), or ``None`` when it declares nothing."""
        if self.fair is None and self.priority_aging is None:
            return None
        return (self.fair or None, self.priority_aging or None)

    def replace(self, **changes: Any) -> QueueConfig:
        """A copy with ``changes`` applied (not validated)."""
        return dataclasses.replace(self, **changes)
