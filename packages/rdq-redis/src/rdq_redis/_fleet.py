"""The worker registry (capability ``worker_registry``) and the per-minute counts
(``counters``): the driver calls of their operations, one script each.

Neither is per queue: each lives under a hash tag of its own (``{_workers}``, ``{_counts}``,
see :mod:`rdq_redis._keys`), one slot on Redis Cluster, so every operation is one script there
too. The script arguments and replies are read in :mod:`rdq_redis._flow`. Kept out of
``_store`` so that it stays the driver calls of the operations every backend has.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from rdq.spi import Counts, WorkerInfo
from rdq_redis import _flow
from rdq_redis._codec import from_us, to_us
from rdq_redis._keys import CountKeys, WorkerKeys
from rdq_redis._scripts import Scripts

__all__ = [
    "add_counts",
    "heartbeat_worker",
    "list_workers",
    "purge_counts",
    "purge_workers",
    "read_counts",
    "remove_worker",
]


def _worker_keys(prefix: str) -> list[str]:
    keys = WorkerKeys(prefix)
    return [keys.info, keys.started, keys.seen]


# --- the worker registry -------------------------------------------------------------------


async def heartbeat_worker(scripts: Scripts, prefix: str, info: WorkerInfo) -> WorkerInfo:
    stored = _flow.worker_json(info)
    started, seen = await scripts.run("heartbeat_worker", _worker_keys(prefix), [info.id, stored])
    return msgspec.structs.replace(
        msgspec.json.decode(stored, type=WorkerInfo),
        started_at=from_us(int(started)),
        seen_at=from_us(int(seen)),
    )


async def list_workers(scripts: Scripts, prefix: str) -> list[WorkerInfo]:
    return _flow.workers_listed(await scripts.run("list_workers", _worker_keys(prefix), []))


async def remove_worker(scripts: Scripts, prefix: str, worker_id: str) -> bool:
    return bool(await scripts.run("remove_worker", _worker_keys(prefix), [worker_id]))


async def purge_workers(scripts: Scripts, prefix: str, seen_before: datetime) -> int:
    cutoff = to_us(seen_before)
    return int(await scripts.run("purge_workers", _worker_keys(prefix), [cutoff]))


# --- the per-minute counts -----------------------------------------------------------------


async def add_counts(scripts: Scripts, prefix: str, counts: list[Counts]) -> None:
    keys = CountKeys(prefix)
    args = [keys.base, len(counts), *_flow.counts_args(counts)]
    await scripts.run("add_counts", [keys.queues], args)


async def read_counts(
    scripts: Scripts, prefix: str, queue: str | None, since: datetime
) -> list[Counts]:
    keys = CountKeys(prefix)
    args = [keys.base, queue or "", _flow.minute_from(since)]
    return _flow.counts_read(await scripts.run("read_counts", [keys.queues], args))


async def purge_counts(scripts: Scripts, prefix: str, before: datetime) -> int:
    keys = CountKeys(prefix)
    args = [keys.base, _flow.minute_from(before)]
    return int(await scripts.run("purge_counts", [keys.queues], args))
