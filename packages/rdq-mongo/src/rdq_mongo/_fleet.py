"""The worker registry (capability ``worker_registry``) and the per-minute counts
(``counters``).

``<prefix>workers``: one document per worker, ``_id`` its id::

    host, pid, version, queues, concurrency, held, state, heartbeat   as given
    extra        JSON text (any keys, stored as given)
    started_at   the server's now at its first heartbeat (kept by later ones), microseconds
    seen_at      the server's now at its last heartbeat, microseconds (index: purge)

``<prefix>counts``: one document per (queue, minute), ``_id`` ``"<queue> <minute>"`` (a queue
name has no space), with ``queue``, ``minute`` (microseconds) and the four numbers, added to
by ``$inc`` in an upsert: atomic on the server, concurrent additions never lose one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec
from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError

from rdq.errors import StorageError
from rdq.spi import Counts, WorkerInfo
from rdq_mongo._codec import from_micros, to_micros
from rdq_mongo._connection import Connection, Document
from rdq_mongo._filters import NOW_US

__all__ = [
    "add_counts",
    "heartbeat",
    "list_workers",
    "purge_counts",
    "purge_workers",
    "read_counts",
    "remove_worker",
]

_NUMBERS = ("succeeded", "failed", "dead", "deferred")
_DUPLICATE_KEY = 11000
# Upserts of one new _id that raced: the losers find the winner's document when run again.
_ROUNDS = 4
_json_decoder = msgspec.json.Decoder()


# --- the worker registry -------------------------------------------------------------------


def _worker_document(info: WorkerInfo) -> Document:
    return {
        "_id": info.id,
        "host": info.host,
        "pid": info.pid,
        "version": info.version,
        "queues": list(info.queues),
        "concurrency": info.concurrency,
        "held": info.held,
        "state": info.state,
        "heartbeat": float(info.heartbeat),
        "extra": msgspec.json.encode(info.extra).decode("utf-8"),
    }


def _worker(doc: Document) -> WorkerInfo:
    try:
        extra = _json_decoder.decode(doc.get("extra") or "{}")
    except msgspec.DecodeError:
        extra = {"unreadable": doc.get("extra")}
    queues = doc.get("queues")
    return WorkerInfo(
        id=str(doc["_id"]),
        host=str(doc.get("host") or ""),
        pid=int(doc.get("pid") or 0),
        version=str(doc.get("version") or ""),
        queues=[str(q) for q in queues] if isinstance(queues, list) else [],
        concurrency=int(doc.get("concurrency") or 0),
        held=int(doc.get("held") or 0),
        state=str(doc.get("state") or "running"),
        heartbeat=float(doc.get("heartbeat") or 10.0),
        started_at=from_micros(doc.get("started_at")),
        seen_at=from_micros(doc.get("seen_at")),
        extra=extra if isinstance(extra, dict) else {"unreadable": extra},
    )


async def heartbeat(connection: Connection, info: WorkerInfo) -> WorkerInfo:
    """One upsert that replaces the registration, stamps ``seen_at`` with the server's now
    and keeps ``started_at`` (the now of the first heartbeat)."""
    stamped = {
        "$mergeObjects": [
            {"$literal": _worker_document(info)},
            {"started_at": {"$ifNull": ["$started_at", NOW_US]}, "seen_at": NOW_US},
        ]
    }
    for _ in range(_ROUNDS):
        try:
            doc = await connection.workers.find_one_and_update(
                {"_id": info.id},
                [{"$replaceWith": stamped}],
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
        except DuplicateKeyError:
            continue
        if doc is not None:
            return _worker(doc)
    raise StorageError(f"the heartbeat of worker {info.id!r} kept racing another")


async def list_workers(connection: Connection) -> list[WorkerInfo]:
    return [_worker(doc) async for doc in connection.workers.find({}, sort=[("_id", 1)])]


async def remove_worker(connection: Connection, worker_id: str) -> bool:
    result = await connection.workers.delete_one({"_id": worker_id})
    return result.deleted_count > 0


async def purge_workers(connection: Connection, seen_before: datetime) -> int:
    result = await connection.workers.delete_many({"seen_at": {"$lt": to_micros(seen_before)}})
    return result.deleted_count


# --- counts --------------------------------------------------------------------------------------


def _count_id(queue: str, minute_us: int) -> str:
    return f"{queue} {minute_us}"


async def add_counts(connection: Connection, counts: Sequence[Counts]) -> None:
    """One unordered bulk of ``$inc`` upserts; an upsert that lost the insert of a new
    (queue, minute) to a concurrent one is sent again (it then finds the document)."""
    operations = []
    for entry in counts:
        minute = to_micros(entry.minute)
        assert minute is not None
        operations.append(
            UpdateOne(
                {"_id": _count_id(entry.queue, minute)},
                {
                    "$inc": {name: getattr(entry, name) for name in _NUMBERS},
                    "$setOnInsert": {"queue": entry.queue, "minute": minute},
                },
                upsert=True,
            )
        )
    for _ in range(_ROUNDS):
        try:
            await connection.counts.bulk_write(operations, ordered=False)
            return
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if not errors or any(e.get("code") != _DUPLICATE_KEY for e in errors):
                raise
            operations = [operations[e["index"]] for e in errors]
    raise StorageError("add_counts kept racing other writers of the same minutes")


def _counts(doc: Document) -> Counts:
    minute = from_micros(doc.get("minute"))
    assert minute is not None
    return Counts(
        queue=str(doc.get("queue")),
        minute=minute,
        **{name: int(doc.get(name) or 0) for name in _NUMBERS},
    )


async def read_counts(connection: Connection, queue: str | None, since: datetime) -> list[Counts]:
    query: Document = {"minute": {"$gte": to_micros(since)}}
    if queue is not None:
        query["queue"] = queue
    found = connection.counts.find(query, sort=[("queue", 1), ("minute", 1)])
    return [_counts(doc) async for doc in found]


async def purge_counts(connection: Connection, before: datetime) -> int:
    result = await connection.counts.delete_many({"minute": {"$lt": to_micros(before)}})
    return result.deleted_count
