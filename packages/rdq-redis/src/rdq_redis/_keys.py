"""Key names (layout 3). Every key of one queue shares the hash tag ``{queue}``, so on Redis
Cluster a queue lives in one slot and each per-queue script touches a single slot.

==============================================  ======  =====================================
``<prefix>:{<queue>}:levels``                   zset    priorities that may hold PENDING or
                                                        IN_FLIGHT tasks (member and score = p)
``<prefix>:{<queue>}:pending:<p>``              zset    PENDING ids of priority p, scored by
                                                        next_attempt_at (µs)
``<prefix>:{<queue>}:inflight:<p>``             zset    IN_FLIGHT ids of priority p, scored by
                                                        lease_expires_at (µs)
``<prefix>:{<queue>}:dead``                     zset    DEAD ids by dead_lettered_at (µs); equal
                                                        scores order by id bytes: the DLQ order
``<prefix>:{<queue>}:succeeded``                zset    SUCCEEDED ids by completed_at (µs)
``<prefix>:{<queue>}:cancelled``                zset    CANCELLED ids by cancelled_at (µs)
``<prefix>:{<queue>}:groups``                   hash    DLQ group id -> (handler_ref, error_type)
``<prefix>:{<queue>}:group:<gid>``              zset    DEAD ids of one group by dead_lettered_at
``<prefix>:{<queue>}:task:<id>``                hash    one task (see :mod:`rdq_redis._codec`)
``<prefix>:{<queue>}:wake``                     pubsub  wake-up channel for ``wait_due``
``<prefix>:{<queue>}:controls``                 set     the keys that have a control record
``<prefix>:{<queue>}:ctl:<key>``                hash    the control record of one key, with its
                                                        rate bucket (``tokens``, ``refilled``)
``<prefix>:{<queue>}:lease:<key>``              zset    IN_FLIGHT ids with ``key`` by
                                                        lease_expires_at, kept for every key
                                                        but ``*`` that has a control record
``<prefix>:{<queue>}:held:<p>:<key>``           zset    PENDING ids of priority p a claim found
                                                        held back by ``key``'s control, by
                                                        next_attempt_at
``<prefix>:{<queue>}:heldlost:<p>:<key>``       zset    the same for IN_FLIGHT ids with a lapsed
                                                        lease, by lease_expires_at
``<prefix>:{<queue>}:heldkeys``                 set     the held sets that may hold ids
                                                        (``held:<p>:<key>``, ``heldlost:...``)
``<prefix>:{<queue>}:dedup:<key>``              hash    a dedup key's holder (``task``) and
                                                        until when (``until``, µs; none: while
                                                        the task is live)
``<prefix>:id:{<id>}``                          string  id -> queue index (IDConflict, ``get``)
``<prefix>:dedup:{<key>}``                      string  dedup key -> queue index (DedupConflict)
``<prefix>:queues``                             set     names of queues that may hold tasks
``<prefix>:controlled``                         set     names of queues that may hold controls
``<prefix>:layout``                             string  the key layout version (``LAYOUT``)
``<prefix>:{_audit}:log``                       zset    audit entry ids by time (µs)
``<prefix>:{_audit}:entry:<id>``                hash    one audit entry
``<prefix>:{_audit}:seq``                       string  the last audit entry id
``<prefix>:{_workers}:info``                    hash    worker id -> its registration (JSON)
``<prefix>:{_workers}:started``                 hash    worker id -> its first heartbeat (µs)
``<prefix>:{_workers}:seen``                    zset    worker ids by their last heartbeat (µs)
``<prefix>:{_counts}:queues``                   set     queues that have counts
``<prefix>:{_counts}:q:<queue>``                zset    the minutes of one queue's counts
                                                        (member and score: minutes since 1970)
``<prefix>:{_counts}:m:<minute>:<queue>``       hash    one (queue, minute)'s counts
==============================================  ======  =====================================

Queue names start with a letter or digit, so ``{_audit}``, ``{_workers}`` and ``{_counts}``
are never a queue's tag: on Cluster each of them is one slot of its own.
"""

from __future__ import annotations

import re

from rdq.errors import ConfigError
from rdq.spi import Status

__all__ = [
    "DEFAULT_PREFIX",
    "LAYOUT",
    "STATUS_SETS",
    "AuditKeys",
    "CountKeys",
    "QueueKeys",
    "WorkerKeys",
    "check_prefix",
    "controlled_key",
    "index_key",
    "layout_key",
    "registry_key",
]

DEFAULT_PREFIX = "rdq"
LAYOUT = 3
"""The key layout this release reads and writes (1: before priorities, groups and audit; 2:
before flow control, whose tasks keep their flow-control keys only inside ``body``)."""

STATUS_SETS = {
    Status.PENDING: "pending",
    Status.IN_FLIGHT: "inflight",
    Status.DEAD: "dead",
    Status.SUCCEEDED: "succeeded",
    Status.CANCELLED: "cancelled",
}
"""The index of each status: a sorted set (or one per priority) scored by its status time
(the scripts add ``:<p>`` for PENDING and IN_FLIGHT)."""

_PREFIX_RE = re.compile(r"[A-Za-z0-9._\-:]{1,64}")


def check_prefix(prefix: object) -> str:
    """Return ``prefix`` if it can start every key name, else raise ``ConfigError``."""
    if not isinstance(prefix, str) or not _PREFIX_RE.fullmatch(prefix):
        raise ConfigError(
            "must be 1-64 characters of A-Z a-z 0-9 . _ - : (no braces)", key="prefix"
        )
    return prefix


def index_key(prefix: str, task_id: str) -> str:
    """The id index entry of ``task_id`` (a key of its own slot on Redis Cluster)."""
    return f"{prefix}:id:{{{task_id}}}"


def dedup_index_key(prefix: str, key: str) -> str:
    """The index entry of dedup key ``key`` (a key of its own slot on Redis Cluster)."""
    return f"{prefix}:dedup:{{{key}}}"


def registry_key(prefix: str) -> str:
    """The set of queue names (``list_queues``)."""
    return f"{prefix}:queues"


def controlled_key(prefix: str) -> str:
    """The set of queue names that may hold control records (``list_controls()``)."""
    return f"{prefix}:controlled"


def layout_key(prefix: str) -> str:
    """The key layout version of everything under ``prefix``."""
    return f"{prefix}:layout"


class QueueKeys:
    """The key names of one queue (the scripts derive the per-priority and per-task ones
    from ``base``)."""

    __slots__ = (
        "base",
        "cancelled",
        "controls",
        "dead",
        "heldkeys",
        "levels",
        "queue",
        "succeeded",
        "wake",
    )

    def __init__(self, prefix: str, queue: str) -> None:
        self.queue = queue
        self.base = f"{prefix}:{{{queue}}}:"
        self.levels = self.base + "levels"
        self.dead = self.base + "dead"
        self.succeeded = self.base + "succeeded"
        self.cancelled = self.base + "cancelled"
        self.wake = self.base + "wake"
        self.controls = self.base + "controls"
        self.heldkeys = self.base + "heldkeys"

    def task(self, task_id: str) -> str:
        return f"{self.base}task:{task_id}"

    def pending(self, priority: int) -> str:
        return f"{self.base}pending:{priority}"

    def inflight(self, priority: int) -> str:
        return f"{self.base}inflight:{priority}"

    def control(self, key: str) -> str:
        return f"{self.base}ctl:{key}"

    def lease(self, key: str) -> str:
        return f"{self.base}lease:{key}"


class AuditKeys:
    """The key names of the audit trail (one slot of its own)."""

    __slots__ = ("base", "log", "seq")

    def __init__(self, prefix: str) -> None:
        self.base = f"{prefix}:{{_audit}}:"
        self.log = self.base + "log"
        self.seq = self.base + "seq"


class WorkerKeys:
    """The key names of the worker registry (one slot of its own: ``{_workers}``)."""

    __slots__ = ("info", "seen", "started")

    def __init__(self, prefix: str) -> None:
        base = f"{prefix}:{{_workers}}:"
        self.info = base + "info"
        self.started = base + "started"
        self.seen = base + "seen"


class CountKeys:
    """The key names of the per-minute counts (one slot of their own: ``{_counts}``); the
    scripts derive each queue's and each (queue, minute)'s keys from ``base``."""

    __slots__ = ("base", "queues")

    def __init__(self, prefix: str) -> None:
        self.base = f"{prefix}:{{_counts}}:"
        self.queues = self.base + "queues"
