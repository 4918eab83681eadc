"""Control records (capability ``control``): the statements of ``list_controls``,
``put_control``, ``delete_control`` and ``retry_now``, and the reading of their rows.
Arguments come checked by ``StorageBase``.

Control records live in ``control`` (one row per (queue, key), compare-and-set on
``version``); claims honour them in the claim statement itself (``claim_controlled()`` for a
queue that has any: :mod:`rdq_postgres._claims`, docs/postgres-schema.md).
"""

from __future__ import annotations

import asyncpg
import msgspec

from rdq.errors import ControlConflict
from rdq.spi import Control
from rdq_postgres._codec import encode_json, json_object
from rdq_postgres._connection import Database
from rdq_postgres._queries import Queries

__all__ = ["delete_control", "list_controls", "put_control", "retry_now"]

_decode = msgspec.json.decode


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
        state=json_object(row["state"]),
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


async def retry_now(db: Database, sql: Queries, queue: str, task_ids: list[str]) -> int:
    """Make the listed PENDING tasks of ``queue`` that are not yet due due now; how many."""
    return await db.execute(sql.retry_now, queue=queue, ids=task_ids)
