"""What leaves the Redis store: ``expire_tasks``, the retention step, one script
(``lua/expire_tasks.lua``) that deletes the listed finished tasks of a queue whose status time
is before the cut-off, with their set, group and index entries (the engine archived those
tasks first)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rdq_redis._codec import to_us
from rdq_redis._connection import Scripts
from rdq_redis._keys import QueueKeys

__all__ = ["expire_tasks"]


async def expire_tasks(
    scripts: Scripts,
    qk: QueueKeys,
    *,
    prefix: str,
    indexed: str,
    registry: str,
    ids: Sequence[str],
    before: datetime,
) -> tuple[list[bytes], int]:
    """The ids deleted, and 1 if the queue holds nothing any more (else 0)."""
    args = [qk.base, prefix, to_us(before), indexed, registry, qk.queue, *ids]
    deleted, empty = await scripts.run("expire_tasks", [qk.levels], args)
    return list(deleted), int(empty)
