"""``claim_due``: one call of ``claim_due.lua``, and its reply read back as claims.

The script does the whole claim atomically, by the server's ``TIME``: for each priority,
highest first, the oldest due tasks of the pending and in-flight sets (a lapsed lease is due at
its expiry and gets a ``LEASE_EXPIRED`` attempt, naming its holder, appended and counted),
each leased with a fresh token. In front of it :mod:`rdq_redis._queries` puts
``lua/_flow.lua``: a queue with control records has every task pass the controls of its keys
in the same script (pauses, gates, concurrency counted from the per-key lease sets, rate
buckets refilled), and tasks held back are moved into held sets per key, so a paused backlog
is never scanned again; and ``lua/_order.lua``: a queue whose own control sets ``fair`` or
``aging`` is claimed in that order. docs/redis.md says what each costs.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from rdq.spi import Claimed, Status
from rdq_redis._args import micros
from rdq_redis._codec import envelope_from_hash, error_arg, hash_pairs
from rdq_redis._connection import Scripts
from rdq_redis._keys import QueueKeys

__all__ = ["claim_due", "claimed"]


async def claim_due(
    scripts: Scripts,
    prefix: str,
    queue: str,
    limit: int,
    lease: timedelta,
    worker_id: str | None,
) -> list[Claimed]:
    """Claim up to ``limit`` due tasks of ``queue`` in claim order."""
    qk = QueueKeys(prefix, queue)
    # The token names the queue, so resolving a claim needs no id -> queue lookup; the
    # script makes one per task claimed from this claim's random stem.
    stem = f"{queue}/{secrets.token_hex(16)}"
    reply = await scripts.run(
        "claim_due",
        [qk.levels],
        [qk.base, micros(lease), error_arg(worker_id), limit, stem],
    )
    return claimed(queue, reply)


def claimed(queue: str, reply: Any) -> list[Claimed]:
    """``claim_due.lua``'s reply (id, token and hash of each task claimed) as claims."""
    return [
        Claimed(
            envelope_from_hash(
                hash_pairs(fields), task_id=task_id.decode(), queue=queue, status=Status.IN_FLIGHT
            ),
            token.decode(),
        )
        for task_id, token, fields in reply
    ]
