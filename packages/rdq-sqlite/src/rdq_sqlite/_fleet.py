"""The worker registry and the per-minute counts (contract version 3): tables ``worker`` and
``counts``. Writes are functions run inside one write transaction (see
:mod:`rdq_sqlite._writes`); reads run on the read link. Counts are added by one upsert per
entry (``add_counts.sql``), so concurrent additions from many workers never lose one."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from rdq.spi import Counts, WorkerInfo
from rdq_sqlite._clock import tick
from rdq_sqlite._codec import at_us, to_us
from rdq_sqlite._queries import SQL

__all__ = [
    "add_counts",
    "heartbeat",
    "list_workers",
    "purge_counts",
    "purge_workers",
    "read_counts",
    "remove_worker",
]

_encode = msgspec.json.Encoder().encode
_decode_object = msgspec.json.Decoder(dict[str, Any]).decode
_decode_queues = msgspec.json.Decoder(list[str]).decode


def _json(value: Any) -> str:
    return _encode(value).decode()


def heartbeat(conn: sqlite3.Connection, info: WorkerInfo) -> WorkerInfo:
    """Store ``info`` seen now (started now at its first heartbeat); return it as stored."""
    now = tick(conn)
    extra = _json(info.extra)
    started, seen = conn.execute(
        SQL.heartbeat_worker,
        {
            "id": info.id,
            "host": info.host,
            "pid": info.pid,
            "version": info.version,
            "queues": _json(info.queues),
            "concurrency": info.concurrency,
            "held": info.held,
            "state": info.state,
            "heartbeat": float(info.heartbeat),
            "now": now,
            "extra": extra,
        },
    ).fetchone()
    return msgspec.structs.replace(
        info,
        queues=list(info.queues),
        heartbeat=float(info.heartbeat),
        extra=_decode_object(extra),
        started_at=at_us(started),
        seen_at=at_us(seen),
    )


def _worker(row: Sequence[Any]) -> WorkerInfo:
    """A row as ``list_workers.sql`` selects it; JSON spoiled by a hand edit is shown, never
    raised."""
    try:
        queues = _decode_queues(row[4])
    except Exception:
        queues = []
    try:
        extra = _decode_object(row[11])
    except Exception:
        extra = {"unreadable": row[11]}
    return WorkerInfo(
        id=row[0],
        host=row[1],
        pid=row[2],
        version=row[3],
        queues=queues,
        concurrency=row[5],
        held=row[6],
        state=row[7],
        heartbeat=row[8],
        started_at=at_us(row[9]),
        seen_at=at_us(row[10]),
        extra=extra,
    )


def list_workers(conn: sqlite3.Connection) -> list[WorkerInfo]:
    return [_worker(row) for row in conn.execute(SQL.list_workers)]


def remove_worker(conn: sqlite3.Connection, worker_id: str) -> bool:
    return conn.execute(SQL.remove_worker, {"id": worker_id}).rowcount > 0


def purge_workers(conn: sqlite3.Connection, seen_before: datetime) -> int:
    cursor = conn.execute(SQL.purge_workers, {"before": to_us(seen_before)})
    return cursor.rowcount


def add_counts(conn: sqlite3.Connection, counts: Sequence[Counts]) -> None:
    conn.executemany(
        SQL.add_counts,
        [
            {
                "queue": entry.queue,
                "minute": to_us(entry.minute),
                "succeeded": entry.succeeded,
                "failed": entry.failed,
                "dead": entry.dead,
                "deferred": entry.deferred,
            }
            for entry in counts
        ],
    )


def read_counts(conn: sqlite3.Connection, queue: str | None, since: datetime) -> list[Counts]:
    """The counts of ``queue`` (of every queue for ``None``) from ``since`` on, by queue then
    minute."""
    if queue is None:
        rows = conn.execute(SQL.read_all_counts, {"since": to_us(since)})
    else:
        rows = conn.execute(SQL.read_counts, {"queue": queue, "since": to_us(since)})
    return [
        Counts(
            queue=name,
            minute=at_us(minute),
            succeeded=succeeded,
            failed=failed,
            dead=dead,
            deferred=deferred,
        )
        for name, minute, succeeded, failed, dead, deferred in rows
    ]


def purge_counts(conn: sqlite3.Connection, before: datetime) -> int:
    return conn.execute(SQL.purge_counts, {"before": to_us(before)}).rowcount
