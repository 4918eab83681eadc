"""Flow control, the worker registry and the counts (contract version 3): the statements of
each operation and the reading of their rows. Arguments come checked by ``StorageBase``.

Control records live in ``control`` (one row per (queue, key), compare-and-set on
``version``), and claims honour them in ``claim.sql`` itself (``claim_controlled()`` for a
queue that has any); workers in ``worker``, counts in ``counts`` (see
docs/postgres-schema.md)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg
import msgspec

from rdq.errors import ControlConflict
from rdq.spi import Control, Counts, WorkerInfo
from rdq_postgres._codec import encode_json, text_column
from rdq_postgres._connection import Database
from rdq_postgres._queries import Queries

__all__ = [
    "add_counts",
    "delete_control",
    "heartbeat_worker",
    "list_controls",
    "list_workers",
    "put_control",
    "read_counts",
]

_decode = msgspec.json.decode


def _object(raw: str | None) -> dict[str, Any]:
    """A stored JSON object (``state``, ``extra``); ``{}`` for one that is not (a row written
    by hand)."""
    if raw is None:
        return {}
    try:
        value = _decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _control(row: asyncpg.Record) -> Control:
    return Control(
        queue=row["queue"],
        key=row["key"],
        paused=row["paused"],
        gate=row["gate"],
        concurrency=row["concurrency"],
        rate=row["rate"],
        per=row["per"],
        burst=row["burst"],
        fair=row["fair"],
        aging=row["aging"],
        state=_object(row["state"]),
        version=row["version"],
        updated_at=row["updated_at"],
        in_use=row["in_use"],
    )


async def list_controls(
    db: Database, sql: Queries, queue: str | None, key: str | None = None
) -> list[Control]:
    """The controls of ``queue`` (every queue: ``None``), of ``key`` only when given."""
    rows = await db.fetch(sql.list_controls, queue=queue, key=key)
    return [_control(row) for row in rows]


async def put_control(
    db: Database, sql: Queries, control: Control, expected_version: int
) -> Control:
    """One statement: the INSERT (expected version 0) or the UPDATE fenced on the version;
    no row back is a conflict, and a second statement reads what is there for it."""
    row = await db.fetch(
        sql.put_control,
        queue=control.queue,
        key=control.key,
        paused=control.paused,
        gate=control.gate,
        concurrency=control.concurrency,
        rate=control.rate,
        per=float(control.per),
        burst=control.burst,
        fair=control.fair,
        aging=None if control.aging is None else float(control.aging),
        state=encode_json(control.state),
        expected_version=expected_version,
    )
    if not row:
        raise await _conflict(db, sql, control.queue, control.key)
    return msgspec.structs.replace(
        control,
        state=_decode(encode_json(control.state)),
        version=row[0]["version"],
        updated_at=row[0]["updated_at"],
        in_use=None,
    )


async def delete_control(
    db: Database, sql: Queries, queue: str, key: str, expected_version: int
) -> bool:
    row = await db.fetchrow(
        sql.delete_control, queue=queue, key=key, expected_version=expected_version
    )
    if row["deleted"]:
        return True
    found = await list_controls(db, sql, queue, key)
    if found:
        raise ControlConflict(queue, key, found[0])
    return False


async def _conflict(db: Database, sql: Queries, queue: str, key: str) -> ControlConflict:
    found = await list_controls(db, sql, queue, key)
    return ControlConflict(queue, key, found[0] if found else None)


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
            extra=_object(row["extra"]),
        )
        for row in await db.fetch(sql.list_workers)
    ]


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
