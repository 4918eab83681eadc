"""Flow control: circuit breakers, pauses and limits — what a claim may take, decided by the
engine and kept in the store's control records (see :class:`rdq.spi.Control`).

- :mod:`rdq.flow._breaker`: the breaker's rules, as pure functions over a control record;
- :mod:`rdq.flow._limits`: the rules of declared limits (written, lifted, lowered after a
  ``RetryAfter`` and restored), likewise;
- :mod:`rdq.flow._compose`: what a record keeps of its limits, and the one rule for the
  limit fields the store enforces (:func:`compose`);
- :mod:`rdq.flow._keys`: which key a task's breaker and limits have.

The worker applies them (:mod:`rdq.worker._flow`, :mod:`rdq.worker._limits`); operators act
through :class:`rdq.admin.TaskAdmin` (pause, resume, breakers by hand).
"""

from rdq.flow._breaker import (
    BreakerState,
    Outage,
    State,
    Window,
    begin_probing,
    breaker_of,
    close,
    force_open,
    probe_window,
    ramp,
    ramp_rate_of,
    reopen,
    reprobe,
    trip,
    widen,
    with_breaker,
)
from rdq.flow._compose import LimitState, Lowered, compose, limit_of, lowered_of
from rdq.flow._keys import breaker_key, dependency_key
from rdq.flow._limits import declare, lower, restore, state_of, undeclare

__all__ = [
    "BreakerState",
    "LimitState",
    "Lowered",
    "Outage",
    "State",
    "Window",
    "begin_probing",
    "breaker_key",
    "breaker_of",
    "close",
    "compose",
    "declare",
    "dependency_key",
    "force_open",
    "limit_of",
    "lower",
    "lowered_of",
    "probe_window",
    "ramp",
    "ramp_rate_of",
    "reopen",
    "reprobe",
    "restore",
    "state_of",
    "trip",
    "undeclare",
    "widen",
    "with_breaker",
]
