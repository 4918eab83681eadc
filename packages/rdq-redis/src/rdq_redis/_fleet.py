"""The worker registry (capability ``worker_registry``) and the per-minute counts
(``counters``): the driver calls of their operations, one script each.

Neither is per queue: each lives under a hash tag of its own (``{_workers}``, ``{_counts}``,
see :mod:`rdq_redis._keys`), one slot on Redis Cluster, so every operation is one script there
too. Below the calls: the script arguments built from the contract's types, and the replies
read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from rdq.spi import Counts, WorkerInfo
from rdq_redis._codec import from_us, hash_pairs, score_us, to_us
from rdq_redis._connection import Scripts
from rdq_redis._keys import CountKeys, WorkerKeys

__all__ = [
    "add_counts",
    "counts_args",
    "counts_read",
    "heartbeat_worker",
    "list_workers",
    "minute_at",
    "minute_from",
    "purge_counts",
    "purge_workers",
    "read_counts",
    "remove_worker",
    "worker_json",
    "workers_listed",
]

_US_PER_MINUTE = 60_000_000

_worker_decoder = msgspec.json.Decoder(WorkerInfo)
_encoder = msgspec.json.Encoder()


def _worker_keys(prefix: str) -> list[str]:
    keys = WorkerKeys(prefix)
    return [keys.info, keys.started, keys.seen]


# --- the worker registry -------------------------------------------------------------------


async def heartbeat_worker(scripts: Scripts, prefix: str, info: WorkerInfo) -> WorkerInfo:
    stored = worker_json(info)
    started, seen = await scripts.run("heartbeat_worker", _worker_keys(prefix), [info.id, stored])
    return msgspec.structs.replace(
        msgspec.json.decode(stored, type=WorkerInfo),
        started_at=from_us(int(started)),
        seen_at=from_us(int(seen)),
    )


async def list_workers(scripts: Scripts, prefix: str) -> list[WorkerInfo]:
    return workers_listed(await scripts.run("list_workers", _worker_keys(prefix), []))


async def remove_worker(scripts: Scripts, prefix: str, worker_id: str) -> bool:
    return bool(await scripts.run("remove_worker", _worker_keys(prefix), [worker_id]))


async def purge_workers(scripts: Scripts, prefix: str, seen_before: datetime) -> int:
    cutoff = to_us(seen_before)
    return int(await scripts.run("purge_workers", _worker_keys(prefix), [cutoff]))


# --- the per-minute counts -----------------------------------------------------------------


async def add_counts(scripts: Scripts, prefix: str, counts: list[Counts]) -> None:
    keys = CountKeys(prefix)
    args = [keys.base, len(counts), *counts_args(counts)]
    await scripts.run("add_counts", [keys.queues], args)


async def read_counts(
    scripts: Scripts, prefix: str, queue: str | None, since: datetime
) -> list[Counts]:
    keys = CountKeys(prefix)
    args = [keys.base, queue or "", minute_from(since)]
    return counts_read(await scripts.run("read_counts", [keys.queues], args))


async def purge_counts(scripts: Scripts, prefix: str, before: datetime) -> int:
    keys = CountKeys(prefix)
    args = [keys.base, minute_from(before)]
    return int(await scripts.run("purge_counts", [keys.queues], args))


# --- script arguments and replies -----------------------------------------------------------


def worker_json(info: WorkerInfo) -> bytes:
    """A worker's registration as the registry stores it (the store's times left out)."""
    return _encoder.encode(msgspec.structs.replace(info, started_at=None, seen_at=None))


def workers_listed(reply: Any) -> list[WorkerInfo]:
    """``list_workers.lua``'s reply, by id. An entry that does not decode (edited by hand) is
    left out."""
    infos, started, seen = hash_pairs(reply[0]), hash_pairs(reply[1]), hash_pairs(reply[2])
    workers = []
    for raw_id, raw in sorted(infos.items()):
        try:
            info = _worker_decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        first, last = started.get(raw_id), seen.get(raw_id)
        workers.append(
            msgspec.structs.replace(
                info,
                id=raw_id.decode(),
                started_at=from_us(int(first)) if first is not None else None,
                seen_at=from_us(score_us(last)) if last is not None else None,
            )
        )
    workers.sort(key=lambda w: w.id)
    return workers


def minute_at(minute: datetime) -> int:
    """A whole minute as the counts keys name it: minutes since 1970."""
    return to_us(minute) // _US_PER_MINUTE


def minute_from(at: datetime) -> int:
    """The first whole minute at or after ``at``, as :func:`minute_at` names it."""
    return -(-to_us(at) // _US_PER_MINUTE)


def counts_args(counts: Sequence[Counts]) -> list[Any]:
    """The entries ``add_counts.lua`` takes after (key base, n)."""
    args: list[Any] = []
    for entry in counts:
        args += [
            entry.queue,
            minute_at(entry.minute),
            entry.succeeded,
            entry.failed,
            entry.dead,
            entry.deferred,
        ]
    return args


def counts_read(reply: Any) -> list[Counts]:
    """``read_counts.lua``'s reply, by queue then minute."""
    out = [
        Counts(
            queue=queue.decode(),
            minute=from_us(int(minute) * _US_PER_MINUTE),
            succeeded=int(succeeded),
            failed=int(failed),
            dead=int(dead),
            deferred=int(deferred),
        )
        for queue, minute, succeeded, failed, dead, deferred in reply
    ]
    out.sort(key=lambda c: (c.queue, c.minute))
    return out
