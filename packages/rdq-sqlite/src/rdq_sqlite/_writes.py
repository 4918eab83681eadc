"""The store's other mutations (leases, resolutions, the DLQ, cancel, purges, the audit
trail): each one function run whole inside one write transaction. Admission is in
:mod:`rdq_sqlite._admission`, claims in :mod:`rdq_sqlite._claims`, control records in
:mod:`rdq_sqlite._controls`, the worker registry and counts in :mod:`rdq_sqlite._fleet`.

Every function here takes the connection of the store's write link (already inside ``BEGIN
IMMEDIATE``, see :mod:`rdq_sqlite._connection`) and validated arguments, and either returns
or raises with nothing changed (the transaction is rolled back). Time comes from
:func:`rdq_sqlite._clock.tick`, read after the write lock is held.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import msgspec

from rdq.errors import NotFound, StaleClaim
from rdq.spi import (
    Attempt,
    AuditEntry,
    Completion,
    Selector,
    fence,
)
from rdq_sqlite._clock import tick
from rdq_sqlite._codec import (
    audit_id,
    audit_params,
    dlq_filter_params,
    encode_attempt,
    from_us,
    ids_param,
)
from rdq_sqlite._controls import lapsed_lease_fits
from rdq_sqlite._queries import SQL

__all__ = [
    "append_audit",
    "cancel",
    "complete_many",
    "extend_lease",
    "purge",
    "purge_finished",
    "redrive",
    "resolve",
]


def _fence(conn: sqlite3.Connection, task_id: str, row: object) -> None:
    """``StaleClaim`` or ``NotFound`` unless the fenced statement returned a ``row``."""
    if row is None:
        found = conn.execute(SQL.task_queue, {"id": task_id}).fetchone() is not None
        fence(task_id, found=found, applied=False)


def extend_lease(conn: sqlite3.Connection, task_id: str, token: str, lease_us: int) -> int:
    """The new lease expiry (the store's now + lease) of a claim still held; ``StaleClaim``
    for a lapsed lease whose concurrency slot another task took meanwhile."""
    now = tick(conn)
    if not lapsed_lease_fits(conn, task_id, token, now):
        raise StaleClaim(task_id)
    row = conn.execute(
        SQL.extend_lease, {"id": task_id, "token": token, "expires": now + lease_us}
    ).fetchone()
    _fence(conn, task_id, row)
    expires: int = row[0]
    return expires


def resolve(
    conn: sqlite3.Connection,
    statement: str,
    task_id: str,
    token: str,
    attempt: Attempt,
    next_at_us: int | None = None,
) -> str:
    """Apply one fenced resolution (``reschedule``, ``complete`` or ``dead_letter``); return
    the task's queue. ``StaleClaim`` or ``NotFound`` (nothing changed) otherwise."""
    now = tick(conn)
    row = conn.execute(
        statement,
        {
            "id": task_id,
            "token": token,
            "now": now,
            "next_at": next_at_us,
            "attempt": encode_attempt(attempt),
            "error_type": attempt.error_type,
        },
    ).fetchone()
    _fence(conn, task_id, row)
    queue: str = row[0]
    return queue


def complete_many(
    conn: sqlite3.Connection, completions: Sequence[Completion]
) -> list[StaleClaim | NotFound | None]:
    """``complete`` per item, each fenced on its own token, in one transaction; an item
    with ``discard`` deletes its task (``discard_completed.sql``)."""
    now = tick(conn)
    results: list[StaleClaim | NotFound | None] = []
    for item in completions:
        row = conn.execute(
            SQL.discard_completed if item.discard else SQL.complete,
            {
                "id": item.task_id,
                "token": item.token,
                "now": now,
                "attempt": encode_attempt(item.attempt),
                "error_type": item.attempt.error_type,
            },
        ).fetchone()
        try:
            _fence(conn, item.task_id, row)
        except (StaleClaim, NotFound) as refused:
            results.append(refused)
        else:
            results.append(None)
    return results


def redrive(conn: sqlite3.Connection, queue: str, selector: Selector) -> int:
    now = tick(conn)
    if selector.ids is not None:
        cursor = conn.execute(
            SQL.redrive_ids, {"queue": queue, "ids": ids_param(selector.ids), "now": now}
        )
    else:
        params = dlq_filter_params(selector.filter)
        cursor = conn.execute(SQL.redrive_filter, {"queue": queue, "now": now, **params})
    return cursor.rowcount


def purge(conn: sqlite3.Connection, queue: str, selector: Selector) -> int:
    if selector.ids is not None:
        cursor = conn.execute(SQL.purge_ids, {"queue": queue, "ids": ids_param(selector.ids)})
    else:
        params = dlq_filter_params(selector.filter)
        cursor = conn.execute(SQL.purge_filter, {"queue": queue, **params})
    return cursor.rowcount


def purge_finished(conn: sqlite3.Connection, queue: str, before_us: int, chunk: int) -> int:
    """Delete up to ``chunk`` SUCCEEDED/CANCELLED tasks finished before ``before_us``."""
    cursor = conn.execute(SQL.purge_finished, {"queue": queue, "before": before_us, "chunk": chunk})
    return cursor.rowcount


def cancel(conn: sqlite3.Connection, queue: str, task_ids: Sequence[str]) -> int:
    now = tick(conn)
    cursor = conn.execute(SQL.cancel, {"queue": queue, "ids": ids_param(task_ids), "now": now})
    return cursor.rowcount


def append_audit(conn: sqlite3.Connection, entry: AuditEntry) -> AuditEntry:
    now = tick(conn)
    seq: int = conn.execute(SQL.append_audit, {"time": now, **audit_params(entry)}).fetchone()[0]
    return msgspec.structs.replace(entry, id=audit_id(seq), time=from_us(now))
