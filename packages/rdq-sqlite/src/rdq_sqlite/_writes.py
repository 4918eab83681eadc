"""The store's mutations: each one function run whole inside one write transaction.

Every function here takes the connection of the store's write link (already inside ``BEGIN
IMMEDIATE``, see :mod:`rdq_sqlite._connection`) and validated arguments, and either returns
or raises with nothing changed (the transaction is rolled back). Time comes from
:func:`rdq_sqlite._clock.tick`, read after the write lock is held.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import msgspec

from rdq.errors import IDConflict, NotFound, StaleClaim
from rdq.spi import (
    MAX_PRIORITY,
    Attempt,
    AuditEntry,
    Claimed,
    Completion,
    Envelope,
    Outcome,
    Selector,
    Status,
    fence,
    first_of_each_id,
    stored_flags,
)
from rdq_sqlite import _flow
from rdq_sqlite._clock import advance, tick
from rdq_sqlite._codec import (
    audit_id,
    audit_params,
    dlq_filter_params,
    encode_attempt,
    envelope_from_row,
    from_us,
    import_row,
    new_row,
    to_us,
)
from rdq_sqlite._queries import SQL

__all__ = [
    "append_audit",
    "cancel",
    "claim",
    "complete_many",
    "enqueue",
    "extend_lease",
    "import_tasks",
    "purge",
    "purge_finished",
    "redrive",
    "resolve",
]

_ids_json = msgspec.json.Encoder().encode


def _ids(ids: Sequence[str]) -> str:
    return _ids_json(list(ids)).decode()


def _new(conn: sqlite3.Connection, tasks: Sequence[Envelope]) -> list[Envelope]:
    """The first task of each id that the database does not hold yet. ``IDConflict`` (and
    nothing stored) for an id given in two queues of the batch or held by another queue."""
    unique = first_of_each_id(tasks)
    rows = conn.execute(SQL.existing_queues, {"ids": _ids([t.id for t in unique])}).fetchall()
    existing: dict[str, str] = dict(rows)
    for task in unique:
        queue = existing.get(task.id)
        if queue is not None and queue != task.queue:
            raise IDConflict(task.id, queue)
    return [task for task in unique if task.id not in existing]


def enqueue(conn: sqlite3.Connection, tasks: Sequence[Envelope], delay_us: int) -> list[bool]:
    """Admit ``tasks``; one "stored" flag per task (see :func:`_new` for ``IDConflict``)."""
    now = tick(conn)
    new = _new(conn, tasks)
    rows = []
    for task in new:
        due = to_us(task.next_attempt_at)
        rows.append(new_row(task, None, now, now + delay_us if due is None else due))
    conn.executemany(SQL.enqueue, rows)
    return stored_flags(tasks, {task.id for task in new})


def _pick(conn: sqlite3.Connection, queue: str, limit: int, now: int) -> list[tuple[Any, ...]]:
    """Up to ``limit`` due tasks of a queue without controls, in claim order.

    The priorities are visited with one index seek each (only those that hold claimable
    tasks), so tasks due later never make a claim scan."""
    picked: list[tuple[Any, ...]] = []
    below = MAX_PRIORITY + 1
    while len(picked) < limit:
        found = conn.execute(SQL.claim_next_priority, {"queue": queue, "below": below}).fetchone()
        if found is None:
            break
        below = found[0]
        picked += conn.execute(
            SQL.claim_candidates,
            {"queue": queue, "priority": below, "now": now, "limit": limit - len(picked)},
        ).fetchall()
    return picked


def claim(
    conn: sqlite3.Connection, queue: str, limit: int, lease_us: int, worker_id: str | None
) -> list[Claimed]:
    """Claim up to ``limit`` due tasks of ``queue``, highest priority first, then oldest due.

    The clock row and whether the queue has controls (or held tasks) are one read; a queue
    without them is claimed as it always was (:func:`_pick`), one with them through its
    controls (:func:`rdq_sqlite._flow.pick`), in the same transaction."""
    latest, controlled = conn.execute(SQL.claim_clock, {"queue": queue}).fetchone()
    now = advance(conn, latest)
    picked = (_flow.pick if controlled else _pick)(conn, queue, limit, now)
    if not picked:
        return []
    common = {"expires": now + lease_us, "now": now, "worker_id": worker_id}
    claimed: dict[str, tuple[Any, ...]] = {}
    pending = [row[0] for row in picked if row[1] == Status.PENDING]
    if pending:
        for row in conn.execute(SQL.claim_pending, {"ids": _ids(pending), **common}):
            claimed[row[1]] = row
    for task_id, status, attempt_count, lease_expires_at, claimed_at, claimed_by in picked:
        if status == Status.PENDING:
            continue
        lapsed = from_us(lease_expires_at)
        record = Attempt(
            number=attempt_count + 1,
            outcome=Outcome.LEASE_EXPIRED,
            error_type="LeaseExpired",
            error_message=(
                f"lease expired at {lapsed.isoformat() if lapsed else '?'} "
                "before the attempt was resolved"
            ),
            started_at=from_us(claimed_at),
            finished_at=from_us(now),
            worker_id=claimed_by,
        )
        row = conn.execute(
            SQL.claim_expired, {"id": task_id, "attempt": encode_attempt(record), **common}
        ).fetchone()
        claimed[row[1]] = row
    return [Claimed(envelope_from_row(claimed[row[0]][1:]), claimed[row[0]][0]) for row in picked]


def _fence(conn: sqlite3.Connection, task_id: str, row: object) -> None:
    """``StaleClaim`` or ``NotFound`` unless the fenced statement returned a ``row``."""
    if row is None:
        found = conn.execute(SQL.task_queue, {"id": task_id}).fetchone() is not None
        fence(task_id, found=found, applied=False)


def extend_lease(conn: sqlite3.Connection, task_id: str, token: str, lease_us: int) -> int:
    """The new lease expiry (the store's now + lease) of a claim still held."""
    now = tick(conn)
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
    """``complete`` per item, each fenced on its own token, in one transaction."""
    now = tick(conn)
    results: list[StaleClaim | NotFound | None] = []
    for item in completions:
        row = conn.execute(
            SQL.complete,
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
            SQL.redrive_ids, {"queue": queue, "ids": _ids(selector.ids), "now": now}
        )
    else:
        params = dlq_filter_params(selector.filter)
        cursor = conn.execute(SQL.redrive_filter, {"queue": queue, "now": now, **params})
    return cursor.rowcount


def purge(conn: sqlite3.Connection, queue: str, selector: Selector) -> int:
    if selector.ids is not None:
        cursor = conn.execute(SQL.purge_ids, {"queue": queue, "ids": _ids(selector.ids)})
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
    cursor = conn.execute(SQL.cancel, {"queue": queue, "ids": _ids(task_ids), "now": now})
    return cursor.rowcount


def import_tasks(conn: sqlite3.Connection, tasks: Sequence[Envelope]) -> list[bool]:
    """Store tasks verbatim; one "stored" flag per task (see :func:`_new` for
    ``IDConflict``)."""
    new = _new(conn, tasks)
    conn.executemany(SQL.import_tasks, [import_row(task) for task in new])
    return stored_flags(tasks, {task.id for task in new})


def append_audit(conn: sqlite3.Connection, entry: AuditEntry) -> AuditEntry:
    now = tick(conn)
    seq: int = conn.execute(SQL.append_audit, {"time": now, **audit_params(entry)}).fetchone()[0]
    return msgspec.structs.replace(entry, id=audit_id(seq), time=from_us(now))
