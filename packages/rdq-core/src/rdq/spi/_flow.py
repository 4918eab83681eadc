"""The shared state flow control and the fleet need (contract version 3): control records,
the worker registry and per-minute counts.

The engine decides — when a breaker trips, how many probes a half-open one lets through, how
fast a redrive or a released backlog may go — and the store keeps what every worker and node
must agree on, atomically and on its own clock:

- a :class:`Control` per (queue, key): a pause, a gate (how many more claims may take the
  key's tasks), a concurrency limit, a rate limit, and state of the engine's own (a breaker's
  window, who paused and why), changed by compare-and-set on its ``version``; ``claim_due``
  honours the controls of every key of a task in the same atomic step that leases it;
- a :class:`WorkerInfo` per worker, kept fresh by its heartbeat;
- :class:`Counts` per queue and minute, added to by the workers, read for the rates of the
  last hour.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from rdq.spi._models import Envelope

__all__ = [
    "QUEUE_KEY",
    "Control",
    "Counts",
    "WorkerInfo",
    "handler_key",
    "task_keys",
]

QUEUE_KEY = "*"
"""The key every task of a queue has: its control applies to the whole queue."""

HANDLER_PREFIX = "handler:"


def handler_key(handler_ref: str) -> str:
    """The key every task of ``handler_ref`` has (``"handler:" + handler_ref``)."""
    return HANDLER_PREFIX + handler_ref


def task_keys(task: Envelope) -> list[str]:
    """Every key of ``task``, in order: the queue's, its handler's, then ``task.keys``."""
    return [QUEUE_KEY, handler_key(task.handler_ref), *task.keys]


class Control(msgspec.Struct, kw_only=True, frozen=True):
    """The flow control of one key of one queue. It applies to every task of ``queue`` that has
    ``key`` (:func:`task_keys`).

    A claim takes a task only when, for each control that applies to it:

    - ``paused`` is false;
    - ``gate`` is ``None`` (no gate), or at least 1: each task claimed takes one from it (in
      the same atomic step; the ``version`` does not change for that);
    - ``concurrency`` is ``None``, or fewer tasks with the key hold a *live* lease (IN_FLIGHT
      with ``lease_expires_at`` after the store's now) — a lapsed lease's slot is free again,
      so a dead worker's slots come back within one lease, and the lapsed lease is extended
      only while a slot is free (``Storage.extend_lease``): at most ``concurrency`` tasks with
      the key ever hold a live lease at once, a limit lowered below its use apart (the live
      leases keep their slots until they end);
    - ``rate`` is ``None``, or a token is left in the key's bucket: ``rate`` claims per
      ``per`` seconds, refilled continuously by the store's clock, holding at most ``burst``
      tokens (default ``max(1, rate // 10)``), so no window of ``per`` seconds sees more than
      ``rate + burst`` claims.

    A task that a control holds back is skipped, never waited on: the claim goes on with the
    tasks behind it.

    Two settings belong to the queue's own control (key ``*``) only, and change the order a
    claim takes due tasks in (contract version 4, see :class:`~rdq.spi.ClaimOrder`):

    - ``fair`` (capability ``fair_shares``): a key prefix (``"tenant:"``). The queue's due
      tasks are shared among their *groups*: a task's group is its first key that starts with
      ``fair`` (``tenant:acme``), and the tasks without such a key are one group of their own.
      A claim takes every group's first task (in the order below) before any group's second,
      and so on: a group's next task waits behind at most one task of each other group, however
      deep their backlogs. ``None``: no groups.
    - ``aging`` (capability ``priority_aging``): seconds of waiting worth one step of priority.
      Tasks are taken oldest *aged due time* first — the due time less ``priority × aging``
      seconds — so a task of priority ``p`` due at ``d`` goes before every task of priority
      ``q`` that became due after ``d + (q − p) × aging``: no priority waits for ever behind a
      stream of higher ones. ``None`` (the default): strict priorities, highest first, oldest
      due first within one.

    ``state`` is the engine's (a breaker's window and cool-down, who paused and why) and is
    stored as given. ``version`` and ``updated_at`` are the store's: every ``put_control``
    sets ``version`` to one more than before (1 for a new control) and ``updated_at`` to the
    store's now. ``in_use`` is filled in by ``list_controls``: how many tasks with the key hold
    a live lease now."""

    queue: str
    key: str
    paused: bool = False
    gate: int | None = None
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    burst: int | None = None
    fair: str | None = None
    aging: float | None = None
    state: dict[str, Any] = {}
    version: int = 0
    updated_at: datetime | None = None
    in_use: int | None = None

    @property
    def bucket(self) -> int:
        """The most tokens the rate bucket holds (``burst``, or a tenth of ``rate``)."""
        if self.burst is not None:
            return self.burst
        return max(1, (self.rate or 0) // 10)


class WorkerInfo(msgspec.Struct, kw_only=True, frozen=True):
    """A worker (or node) as the registry keeps it. The worker fills in everything but
    ``started_at`` (the store's time of its first heartbeat) and ``seen_at`` (the store's time
    of its last one)."""

    id: str
    host: str = ""
    pid: int = 0
    version: str = ""
    queues: list[str] = []
    concurrency: int = 0
    held: int = 0
    """Tasks it held at its last heartbeat."""
    state: str = "running"
    """``running``, or ``stopping`` once it stopped claiming."""
    heartbeat: float = 10.0
    """Seconds between its heartbeats: silent for longer than that, something is wrong."""
    started_at: datetime | None = None
    seen_at: datetime | None = None
    extra: dict[str, Any] = {}


class Counts(msgspec.Struct, kw_only=True, frozen=True):
    """How many attempts of ``queue`` ended in the minute that starts at ``minute`` (store
    time, UTC, whole minute), by how they ended."""

    queue: str
    minute: datetime
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    deferred: int = 0
