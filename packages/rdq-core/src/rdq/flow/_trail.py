"""Which of a breaker's own transitions the audit trail keeps: the two an operator asks about
— when the outage began (the trip that opened a closed breaker) and when it ended (the close,
saying how long it lasted and how many probe rounds failed meanwhile). The probes and the
re-openings between them are logged and counted (``rdq_breaker_transitions_total``), not
written to the trail: an hour of probing every 30 seconds is two entries, not 240.
"""

from __future__ import annotations

from datetime import datetime

from rdq.flow._breaker import BreakerState, State

__all__ = ["outage_length", "trail_reason"]


def trail_reason(
    action: str, before: BreakerState, after: BreakerState, reason: str | None
) -> str | None:
    """The reason to audit the transition ``before`` → ``after`` (made for ``reason``) with,
    or ``None`` when the trail does not keep it."""
    if action == "breaker.open":
        return reason if before.state is State.CLOSED else None
    if action != "breaker.close" or before.state is State.CLOSED:
        return None
    said = [reason] if reason else []
    lasted = outage_length(after)
    if lasted is not None:
        said.append(f"the outage lasted {_span(lasted)}")
    if before.trips > 1:
        said.append(f"{before.trips - 1} probe round(s) failed before")
    return "; ".join(said) or None


def outage_length(breaker: BreakerState, now: datetime | None = None) -> float | None:
    """Seconds the breaker's last outage lasted (until ``now`` while it lasts); ``None``
    without one."""
    if not breaker.outages:
        return None
    last = breaker.outages[-1]
    end = last.end or now
    return None if end is None else max((end - last.start).total_seconds(), 0.0)


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
