"""Key names (layout 2). Every key of one queue shares the hash tag ``{queue}``, so on Redis
Cluster a queue lives in one slot and each per-queue script touches a single slot.

=========================================  ======  ==========================================
``<prefix>:{<queue>}:levels``              zset    priorities that may hold PENDING or
                                                   IN_FLIGHT tasks (member and score = p)
``<prefix>:{<queue>}:pending:<p>``         zset    PENDING ids of priority p, scored by
                                                   next_attempt_at (µs)
``<prefix>:{<queue>}:inflight:<p>``        zset    IN_FLIGHT ids of priority p, scored by
                                                   lease_expires_at (µs)
``<prefix>:{<queue>}:dead``                zset    DEAD ids by dead_lettered_at (µs); equal
                                                   scores order by id bytes: the DLQ order
``<prefix>:{<queue>}:succeeded``           zset    SUCCEEDED ids by completed_at (µs)
``<prefix>:{<queue>}:cancelled``           zset    CANCELLED ids by cancelled_at (µs)
``<prefix>:{<queue>}:groups``              hash    DLQ group id -> (handler_ref, error_type)
``<prefix>:{<queue>}:group:<gid>``         zset    DEAD ids of one group by dead_lettered_at
``<prefix>:{<queue>}:task:<id>``           hash    one task (see :mod:`rdq_redis._codec`)
``<prefix>:{<queue>}:wake``                pubsub  wake-up channel for ``wait_due``
``<prefix>:id:{<id>}``                     string  id -> queue index (IDConflict, ``get``)
``<prefix>:queues``                        set     names of queues that may hold tasks
``<prefix>:layout``                        string  the key layout version (``LAYOUT``)
``<prefix>:{_audit}:log``                  zset    audit entry ids by time (µs)
``<prefix>:{_audit}:entry:<id>``           hash    one audit entry
``<prefix>:{_audit}:seq``                  string  the last audit entry id
=========================================  ======  ==========================================

Queue names start with a letter or digit, so ``{_audit}`` is never a queue's tag.
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
    "QueueKeys",
    "check_prefix",
    "index_key",
    "layout_key",
    "registry_key",
]

DEFAULT_PREFIX = "rdq"
LAYOUT = 2
"""The key layout this release reads and writes (1: before priorities, groups and audit)."""

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


def registry_key(prefix: str) -> str:
    """The set of queue names (``list_queues``)."""
    return f"{prefix}:queues"


def layout_key(prefix: str) -> str:
    """The key layout version of everything under ``prefix``."""
    return f"{prefix}:layout"


class QueueKeys:
    """The key names of one queue (the scripts derive the per-priority and per-task ones
    from ``base``)."""

    __slots__ = ("base", "cancelled", "dead", "levels", "queue", "succeeded", "wake")

    def __init__(self, prefix: str, queue: str) -> None:
        self.queue = queue
        self.base = f"{prefix}:{{{queue}}}:"
        self.levels = self.base + "levels"
        self.dead = self.base + "dead"
        self.succeeded = self.base + "succeeded"
        self.cancelled = self.base + "cancelled"
        self.wake = self.base + "wake"

    def task(self, task_id: str) -> str:
        return f"{self.base}task:{task_id}"

    def pending(self, priority: int) -> str:
        return f"{self.base}pending:{priority}"

    def inflight(self, priority: int) -> str:
        return f"{self.base}inflight:{priority}"


class AuditKeys:
    """The key names of the audit trail (one slot of its own)."""

    __slots__ = ("base", "log", "seq")

    def __init__(self, prefix: str) -> None:
        self.base = f"{prefix}:{{_audit}}:"
        self.log = self.base + "log"
        self.seq = self.base + "seq"
