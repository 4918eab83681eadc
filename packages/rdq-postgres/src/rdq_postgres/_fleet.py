"""The worker registry (capability ``worker_registry``) and the per-minute counts
(``counters``): the statements of each operation and the reading of their rows. Arguments come
checked by ``StorageBase``.

Workers live in table ``worker``, counts in ``counts`` (one row per queue and minute, added to
by an upsert, so concurrent additions never lose one; see docs/postgres-schema.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from rdq.spi import Counts, WorkerInfo
from rdq_postgres._codec import encode_json, json_object, text_column
from rdq_postgres._connection import Database
from rdq_postgres._queries import Queries

__all__ = [
    "add_counts",
    "heartbeat_worker",
    "list_workers",
    "purge_counts",
    "purge_workers",
    "read_counts",
    "remove_worker",
]

_decode = msgspec.json.decode


# --- the worker registry ------------------------------------------------------------------


def _worker_values(info: WorkerInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "host": text_column(info.host),
        "pid": info.pid,
        "version": text_column(info.version),
        "queues": list(info.queues),
        "concurrency": info.concurrency,
        "held": info.held,
        "state": text_column(info.state),
        "heartbeat": float(info.heartbeat),
        "extra": encode_json(info.extra),
    }


async def heartbeat_worker(db: Database, sql: Queries, info: WorkerInfo) -> WorkerInfo:
    row = await db.fetchrow(sql.heartbeat_worker, **_worker_values(info))
    return msgspec.structs.replace(
        info,
        queues=list(info.queues),
        extra=_decode(encode_json(info.extra)),
        started_at=row["started_at"],
        seen_at=row["seen_at"],
    )


async def list_workers(db: Database, sql: Queries) -> list[WorkerInfo]:
    return [
        WorkerInfo(
            id=row["id"],
            host=row["host"],
            pid=row["pid"],
            version=row["version"],
            queues=list(row["queues"]),
            concurrency=row["concurrency"],
            held=row["held"],
            state=row["state"],
            heartbeat=row["heartbeat"],
            started_at=row["started_at"],
            seen_at=row["seen_at"],
            extra=json_object(row["extra"]),
        )
        for row in await db.fetch(sql.list_workers)
    ]


async def remove_worker(db: Database, sql: Queries, worker_id: str) -> bool:
    return bool(await db.execute(sql.remove_worker, id=worker_id))


async def purge_workers(db: Database, sql: Queries, seen_before: datetime) -> int:
    return await db.execute(sql.purge_workers, seen_before=seen_before)


# --- counts -------------------------------------------------------------------------------


async def add_counts(db: Database, sql: Queries, counts: Sequence[Counts]) -> None:
    await db.execute(
        sql.add_counts,
        queues=[c.queue for c in counts],
        minutes=[c.minute for c in counts],
        succeeded=[c.succeeded for c in counts],
        failed=[c.failed for c in counts],
        dead=[c.dead for c in counts],
        deferred=[c.deferred for c in counts],
    )


async def read_counts(
    db: Database, sql: Queries, queue: str | None, since: datetime
) -> list[Counts]:
    return [
        Counts(
            queue=row["queue"],
            minute=row["minute"],
            succeeded=row["succeeded"],
            failed=row["failed"],
            dead=row["dead"],
            deferred=row["deferred"],
        )
        for row in await db.fetch(sql.read_counts, queue=queue, since=since)
    ]


async def purge_counts(db: Database, sql: Queries, before: datetime) -> int:
    return await db.execute(sql.purge_counts, before=before)
