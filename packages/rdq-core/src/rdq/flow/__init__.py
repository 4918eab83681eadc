"""Flow control: circuit breakers, pauses and limits — what a claim may take, decided by the
engine and kept in the store's control records (see :class:`rdq.spi.Control`).

- :mod:`rdq.flow._breaker`: the breaker's rules, as pure functions over a control record;
- :mod:`rdq.flow._keys`: which key a task's breaker and limits have.

The worker applies them (:mod:`rdq.worker._flow`); operators act through
:class:`rdq.admin.TaskAdmin` (pause, resume, breakers by hand).
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
    reopen,
    reprobe,
    trip,
    widen,
    with_breaker,
)
from rdq.flow._keys import breaker_key, dependency_key

__all__ = [
    "BreakerState",
    "Outage",
    "State",
    "Window",
    "begin_probing",
    "breaker_key",
    "breaker_of",
    "close",
    "dependency_key",
    "force_open",
    "probe_window",
    "ramp",
    "reopen",
    "reprobe",
    "trip",
    "widen",
    "with_breaker",
]
