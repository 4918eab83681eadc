"""What a key's control record holds of its declared limits, and the one rule for the limit
fields the store enforces: the control's ``concurrency`` is the declared one, and its rate
is the slowest of the declared rate, that rate lowered after a ``RetryAfter``, and a
breaker's ramp after an outage.

Kept in ``Control.state``: ``limit`` (:class:`LimitState`: what is declared, by whom and
when) and ``lowered`` (:class:`Lowered`: the rate a ``RetryAfter`` set, until when). Every
transition that touches either, or a breaker's ramp, ends with :func:`compose`, so the
fields the store reads always follow from the state beside them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from rdq.flow._limit_config import per_second
from rdq.spi import Control

__all__ = [
    "LIMIT_STATE",
    "LOWERED_STATE",
    "LimitState",
    "Lowered",
    "compose",
    "limit_of",
    "lowered_of",
]

LIMIT_STATE = "limit"
LOWERED_STATE = "lowered"


class LimitState(msgspec.Struct, kw_only=True, frozen=True):
    """The limits declared for one key (see :class:`rdq.flow.KeyedLimit`), with who wrote
    them and from which declaration."""

    name: str
    per_value: bool = False
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    burst: int | None = None
    adaptive: bool = False
    sources: list[str] = []
    declared_at: datetime | None = None
    """Store time at which the writer read its declarations (a worker's start or the last
    change of its app); ``None``: written by a submitter (any worker's declaration wins)."""
    by: str = ""
    """The worker id of the writer, or ``client``."""

    def same(self, other: LimitState) -> bool:
        """True when both declare the same limits (whoever wrote them)."""
        return _limits(self) == _limits(other)

    @property
    def bucket(self) -> int:
        return self.burst if self.burst is not None else max(1, (self.rate or 0) // 10)


def _limits(state: LimitState) -> tuple[Any, ...]:
    return (
        state.name,
        state.per_value,
        state.concurrency,
        state.rate,
        state.per,
        state.burst,
        state.adaptive,
    )


class Lowered(msgspec.Struct, kw_only=True, frozen=True):
    """A rate lowered because a handler raised ``rdq.RetryAfter``: ``rate`` per ``per``
    seconds, from ``since`` until ``until`` (store time)."""

    rate: int
    per: float = 1.0
    since: datetime
    until: datetime
    halvings: int = 1
    error: str | None = None


def _decoded(control: Control | None, name: str, kind: type[Any]) -> Any:
    if control is None:
        return None
    raw = control.state.get(name)
    if raw is None:
        return None
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError:  # written by a newer or a broken engine: as if none
        return None


def limit_of(control: Control | None) -> LimitState | None:
    """The declared limits a control record holds (``None``: none)."""
    found: LimitState | None = _decoded(control, LIMIT_STATE, LimitState)
    return found


def lowered_of(control: Control | None) -> Lowered | None:
    """The lowered rate a control record holds (``None``: none)."""
    found: Lowered | None = _decoded(control, LOWERED_STATE, Lowered)
    return found


def compose(control: Control, ramp: int | None) -> Control:
    """``control`` with the limit fields its state calls for: the declared concurrency, and
    the slowest of the declared rate, the lowered rate and ``ramp`` (a breaker's, per
    second; ``None``: no ramp in progress)."""
    spec = limit_of(control)
    candidates: list[tuple[int, float, int | None]] = []
    if spec is not None and spec.rate is not None:
        candidates.append((spec.rate, spec.per, spec.burst))
        lowered = lowered_of(control)
        if lowered is not None:
            burst = None if spec.burst is None else min(spec.burst, lowered.rate)
            candidates.append((lowered.rate, lowered.per, burst))
    if ramp is not None:
        candidates.append((ramp, 1.0, None))
    rate: int | None = None
    per, burst = 1.0, None
    if candidates:
        rate, per, burst = min(candidates, key=lambda c: per_second(c[0], c[1]))
    return msgspec.structs.replace(
        control,
        concurrency=spec.concurrency if spec is not None else None,
        rate=rate,
        per=per,
        burst=burst,
    )


def with_state(control: Control, name: str, value: msgspec.Struct | None) -> Control:
    """``control`` with ``state[name]`` set to ``value`` (removed when ``None``)."""
    state = dict(control.state)
    if value is None:
        state.pop(name, None)
    else:
        state[name] = msgspec.to_builtins(value)
    return msgspec.structs.replace(control, state=state)
