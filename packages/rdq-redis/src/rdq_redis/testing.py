"""Test hooks of the Redis store (not part of the storage contract): write a stored task that
does not decode, as the compliance kit's ``corrupt_task`` fixture asks."""

from __future__ import annotations

from typing import Any

from rdq.spi import bounds
from rdq_redis._codec import to_us
from rdq_redis._errors import translate_errors
from rdq_redis._keys import index_key, registry_key
from rdq_redis._store import RedisStorage

__all__ = ["put_corrupt_task"]


async def put_corrupt_task(
    store: RedisStorage,
    queue: str,
    task_id: str,
    raw: str = "{not json",
    *,
    kind: str = "undecodable",
) -> None:
    """Store a PENDING task of ``queue``, due now, as a hand edit would, whose ``body`` is
    ``raw`` (which must not decode), or, by ``kind``, a payload nested deeper than any decoder
    recurses (``"deep"``) or a ``created_at`` past the year 9999 (``"far_time"``; see
    ``rdq_compliance.CorruptTaskWriter``). Reads return it with ``corrupt`` set."""
    store._check_open()
    bounds.check_queue(queue)
    bounds.check_task_id(task_id)
    await store._ready()
    if await store._queue_of(task_id) is not None:
        raise ValueError(f"task {task_id!r} exists already")
    prefix = store._prefix
    qk = store._keys(queue)
    due = to_us(await store.now())
    client = store._redis()
    with translate_errors(store._address):
        await client.set(index_key(prefix, task_id), queue)
        await client.sadd(registry_key(prefix), queue)
        await client.hset(qk.task(task_id), mapping=_corrupt_hash(raw, due, kind))
        await client.zadd(qk.pending(0), {task_id: due})
        await client.zadd(qk.levels, {"0": 0})


def _corrupt_hash(raw: str, due_us: int, kind: str) -> dict[Any, Any]:
    """The hash of a PENDING task due at ``due_us`` whose ``body`` is ``raw``, or, by
    ``kind``, whose payload nests 5000 levels deep or whose ``created_at`` lies past the year
    9999."""
    due = str(due_us)
    created = due
    if kind == "deep":
        raw = '{"handler_ref": "corrupt:task", "payload": ' + "[" * 5000 + "]" * 5000 + "}"
    elif kind == "far_time":
        raw, created = '{"handler_ref": "corrupt:task"}', str(10**18)  # about the year 33658
    elif kind != "undecodable":
        raise ValueError(f"unknown kind of corrupt task: {kind!r}")
    return {
        "body": raw,
        "status": "PENDING",
        "attempt_count": "0",
        "redrive_count": "0",
        "attempts": "[]",
        "priority": "0",
        "created_at": created,
        "next_attempt_at": due,
    }
