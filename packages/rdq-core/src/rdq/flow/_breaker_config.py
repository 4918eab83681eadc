"""What an application declares about breakers: :class:`Breaker` (a queue's or a handler's
settings, ``rdq.Breaker``) and the names of dependencies whose handlers trip together."""

from __future__ import annotations

import dataclasses
import math

from rdq._checks import is_int, is_number
from rdq.errors import ConfigError

__all__ = ["Breaker", "check_dependency"]


@dataclasses.dataclass(frozen=True, slots=True)
class Breaker:
    """When a dependency counts as down, and how its tasks are held and let go again.

    The breaker of a key (the handler, or the ``dependency`` a queue or handler names) *trips*
    when, among the attempts of the last ``window`` seconds on that key — at least
    ``min_calls`` of them —, the outage-class failures (connections refused or reset,
    timeouts, ``rdq.RetryAfter``, ``rdq.Unavailable``, 5xx from callbacks, the types in
    ``outage_errors``) reach ``threshold``. While *open*, no worker claims the key's tasks, and
    a claimed one that fails so is rescheduled without using up an attempt. After ``cooldown``
    seconds it is *half-open*: ``probes`` tasks, fleet-wide, may run; a success closes it and
    its held tasks are let go over ``ramp`` seconds; a failure opens it again for twice the
    cool-down, at most ``max_cooldown``. Open for longer than ``alert_after`` seconds, it
    stays open and says so (an ERROR log line, the ``rdq_breaker_open_too_long`` gauge).

    A key's recent outcomes count before its window fills: ``min_calls`` outage-class failures
    in a row on one worker trip it whatever the window holds, and after ``probes`` in a row
    that worker runs at most ``probes`` of the key's tasks at once (the others are handed back
    unrun) until one call comes back otherwise. A task that used up two or more attempts on
    outage-class failures, with no success on its key since the first of them, trips it too
    (a quiet queue's outage). A task held for an outage that would have used up its attempts
    without it goes to the DLQ once its first outage-class failure is ``max_hold`` seconds
    old (``rdq.OutageTooLong``): a dependency down that long, or a task failing for a reason
    of its own, is an operator's to look at."""

    enabled: bool = True
    window: float = 30.0
    min_calls: int = 10
    threshold: float = 0.5
    cooldown: float = 5.0
    max_cooldown: float = 30.0
    probes: int = 3
    ramp: float = 20.0
    alert_after: float = 3600.0
    max_hold: float = 3600.0

    @classmethod
    def off(cls) -> Breaker:
        """No breaker: every failure is charged to its task."""
        return cls(enabled=False)

    def validate(self, key: str) -> Breaker:
        for name in ("window", "cooldown", "max_cooldown", "ramp", "alert_after", "max_hold"):
            value = getattr(self, name)
            if not is_number(value) or not 0 <= value < math.inf:
                raise ConfigError("must be a non-negative number of seconds", f"{key}.{name}")
        if self.window <= 0 or self.cooldown <= 0:
            raise ConfigError("must be a positive number of seconds", f"{key}.window")
        if self.max_cooldown < self.cooldown:
            raise ConfigError("must not be smaller than cooldown", f"{key}.max_cooldown")
        if not is_int(self.min_calls) or self.min_calls < 1:
            raise ConfigError("must be an integer of at least 1", f"{key}.min_calls")
        if not is_int(self.probes) or not 1 <= self.probes <= 1000:
            raise ConfigError("must be an integer from 1 to 1000", f"{key}.probes")
        if not is_number(self.threshold) or not 0 < self.threshold <= 1:
            raise ConfigError("must be a fraction in (0, 1]", f"{key}.threshold")
        if not isinstance(self.enabled, bool):
            raise ConfigError("must be a boolean", f"{key}.enabled")
        return self


def check_dependency(value: object, key: str) -> str | None:
    """A dependency name: 1–100 characters without whitespace, or ``None``."""
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= 100 or any(c.isspace() for c in value):
        raise ConfigError("must be 1-100 characters without whitespace", key=key)
    return value
