"""Key names. Every key of one queue shares the hash tag ``{queue}``, so on Redis Cluster a
queue lives in one slot and each per-queue script touches a single slot.

=====================================  ======  ===============================================
``<prefix>:{<queue>}:pending``         zset    PENDING ids scored by next_attempt_at (µs)
``<prefix>:{<queue>}:inflight``        zset    IN_FLIGHT ids scored by lease_expires_at (µs)
``<prefix>:{<queue>}:dead``            zset    DEAD ids scored by dead_lettered_at (µs); equal
                                               scores order by id bytes: the DLQ keyset order
``<prefix>:{<queue>}:succeeded``       zset    SUCCEEDED ids scored by completed_at (µs)
``<prefix>:{<queue>}:task:<id>``       hash    one task (see :mod:`rdq_redis._codec`)
``<prefix>:{<queue>}:wake``            pubsub  wake-up channel for ``wait_due``
``<prefix>:id:{<id>}``                 string  id -> queue index (IDConflict, ``get``)
=====================================  ======  ===============================================
"""

from __future__ import annotations

import re

from rdq.errors import ConfigError

__all__ = ["DEFAULT_PREFIX", "QueueKeys", "check_prefix", "index_key"]

DEFAULT_PREFIX = "rdq"
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


class QueueKeys:
    """The key names of one queue."""

    __slots__ = ("base", "dead", "inflight", "pending", "queue", "succeeded", "wake")

    def __init__(self, prefix: str, queue: str) -> None:
        self.queue = queue
        self.base = f"{prefix}:{{{queue}}}:"
        self.pending = self.base + "pending"
        self.inflight = self.base + "inflight"
        self.dead = self.base + "dead"
        self.succeeded = self.base + "succeeded"
        self.wake = self.base + "wake"

    def task(self, task_id: str) -> str:
        return f"{self.base}task:{task_id}"
