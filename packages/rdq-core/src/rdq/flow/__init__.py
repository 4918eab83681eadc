"""Flow control: circuit breakers, pauses and limits — what a claim may take, decided by the
engine and kept in the store's control records (see :class:`rdq.spi.Control`).

This package is the one home of their rules, of what an application declares about them, and
of what the worker and the admin layer share (the compare-and-set record update, the operator's
own transitions, the views). It imports nothing of :mod:`rdq.worker` or :mod:`rdq.admin`; they
import it.

What an application declares:

- :mod:`rdq.flow._breaker_config`: :class:`Breaker` (``rdq.Breaker``) and dependency names;
- :mod:`rdq.flow._limit_config`: :class:`Concurrency` and :class:`Rate` (``rdq.Concurrency``,
  ``rdq.Rate``), their keys, and a queue's :class:`LimitPlan`.

The rules, as pure functions over a control record:

- :mod:`rdq.flow._breaker`: the breaker's states and transitions (trip, probe, close, ramp);
- :mod:`rdq.flow._limit_rules`: declared limits written, lifted, lowered after a
  ``RetryAfter`` and restored;
- :mod:`rdq.flow._compose`: what a record keeps of its limits, and the one rule for the limit
  fields the store enforces (:func:`compose`);
- :mod:`rdq.flow._holds`: which claimed task the worker hands back unrun (a pause, an open
  breaker the store's claim could not see yet);
- :mod:`rdq.flow._evidence`: what a task's own failures say of its dependency (a quiet
  queue's outage) and when an outage has held a task too long;
- :mod:`rdq.flow._keys`: which key a task's breaker has, a dependency's key, a paced
  redrive's.

Writing and reading the records:

- :mod:`rdq.flow._records`: :func:`update_control`, the compare-and-set loop every writer
  uses, and the key an operator names;
- :mod:`rdq.flow._manual`: pause and resume, breakers opened and closed by hand (audited);
- :mod:`rdq.flow._provision`: the record of a per-value limit key, created by the first
  submitter of its value;
- :mod:`rdq.flow._views`, :mod:`rdq.flow._limit_views`: breakers, pauses and limits as the
  API, the console, the CLI and the metrics show them;
- :mod:`rdq.flow._trail`: which of a breaker's own transitions the audit trail keeps (the
  outage's start and end, not every probe).

Who applies them: the worker (``rdq/worker/_flow.py`` feeds outcomes to the breakers and
holds tasks, ``_limits.py`` keeps the declared limits in the records, ``_order.py`` the
declared claim order); operators through :class:`rdq.admin.TaskAdmin`; the store in its claim
(each backend's ``_claims.py`` and ``_controls.py``). How a claim honours a record — a pause,
a gate, a concurrency slot, a rate bucket's refill — is the storage contract's promise
(:class:`rdq.spi.Control`), so its Python form for stores that claim in Python
(:class:`rdq.spi.ClaimGate`, :func:`rdq.spi.refill`, :func:`rdq.spi.slots_free`) lives in
``rdq/spi/_gate.py``: a plugin imports only :mod:`rdq.spi`, and the contract imports nothing
of the engine; PostgreSQL and Redis keep the same rule in their SQL and Lua.
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
from rdq.flow._breaker_config import Breaker, check_dependency
from rdq.flow._compose import LimitState, Lowered, compose, limit_of, lowered_of
from rdq.flow._evidence import OUTAGE_TOO_LONG, held_too_long, own_outage
from rdq.flow._holds import claimed_since, paused_key
from rdq.flow._keys import (
    DEPENDENCY_PREFIX,
    OP_PREFIX,
    OPERATION_PREFIX,
    RETENTION_KEY,
    breaker_key,
    dependency_key,
)
from rdq.flow._limit_config import (
    LIMIT_PREFIX,
    Concurrency,
    KeyedLimit,
    Limit,
    LimitPlan,
    Rate,
    check_limits,
    field_value,
    named_key,
    plan_limits,
    value_key,
    value_of,
)
from rdq.flow._limit_rules import declare, lower, restore, state_of, undeclare
from rdq.flow._limit_views import LimitValue, LimitView, count_waiting, limit_views, limit_views_of
from rdq.flow._manual import BreakerChange, force_breaker, set_paused
from rdq.flow._provision import LimitControls
from rdq.flow._records import control_key, holds_nothing, update_control
from rdq.flow._trail import outage_length, trail_reason
from rdq.flow._views import (
    BreakerView,
    PauseView,
    breaker_view,
    breaker_views,
    control_builtins,
    control_list,
    handler_of,
    held_by,
    key_kind,
    pause_views,
)

__all__ = [
    "DEPENDENCY_PREFIX",
    "LIMIT_PREFIX",
    "OPERATION_PREFIX",
    "OP_PREFIX",
    "OUTAGE_TOO_LONG",
    "RETENTION_KEY",
    "Breaker",
    "BreakerChange",
    "BreakerState",
    "BreakerView",
    "Concurrency",
    "KeyedLimit",
    "Limit",
    "LimitControls",
    "LimitPlan",
    "LimitState",
    "LimitValue",
    "LimitView",
    "Lowered",
    "Outage",
    "PauseView",
    "Rate",
    "State",
    "Window",
    "begin_probing",
    "breaker_key",
    "breaker_of",
    "breaker_view",
    "breaker_views",
    "check_dependency",
    "check_limits",
    "claimed_since",
    "close",
    "compose",
    "control_builtins",
    "control_key",
    "control_list",
    "count_waiting",
    "declare",
    "dependency_key",
    "field_value",
    "force_breaker",
    "force_open",
    "handler_of",
    "held_by",
    "held_too_long",
    "holds_nothing",
    "key_kind",
    "limit_of",
    "limit_views",
    "limit_views_of",
    "lower",
    "lowered_of",
    "named_key",
    "outage_length",
    "own_outage",
    "pause_views",
    "paused_key",
    "plan_limits",
    "probe_window",
    "ramp",
    "ramp_rate_of",
    "reopen",
    "reprobe",
    "restore",
    "set_paused",
    "state_of",
    "trail_reason",
    "trip",
    "undeclare",
    "update_control",
    "value_key",
    "value_of",
    "widen",
    "with_breaker",
]
