"""Control records (capability ``control``): ``list_controls``, ``put_control``
(compare-and-set on the version), ``delete_control``, ``retry_now``, their stored form (table
``control``, its rate bucket in ``tokens`` and ``tokens_at``) and the live leases of each key.

Writes are functions run inside one write transaction (see :mod:`rdq_sqlite._connection`);
``list_controls`` runs in one read snapshot. Deleting a control, or lifting every limit it
sets, releases the tasks claims held under its key (see :mod:`rdq_sqlite._claims`). An
extension of a lapsed lease asks :func:`lapsed_lease_fits` whether a slot is free.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import msgspec

from rdq.errors import ControlConflict
from rdq.spi import QUEUE_KEY, Bucket, Control, handler_key, slots_free
from rdq_sqlite._clock import now_for_read, tick
from rdq_sqlite._codec import at_us, decode_keys
from rdq_sqlite._queries import SQL

__all__ = [
    "control_from_row",
    "delete_control",
    "lapsed_lease_fits",
    "list_controls",
    "live_leases",
    "put_control",
    "retry_now",
]

_encode = msgspec.json.Encoder().encode
_decode_state = msgspec.json.Decoder(dict[str, Any]).decode


def _state(raw: str) -> dict[str, Any]:
    try:
        return _decode_state(raw)
    except Exception:  # a control edited by hand: shown, never raised
        return {"unreadable": raw}


def control_from_row(row: tuple[Any, ...]) -> tuple[Control, Bucket | None]:
    """A control row as ``queue_controls.sql`` selects it, and its rate bucket."""
    queue, key, paused, gate, concurrency, rate, per, burst, state, version, updated_at = row[:11]
    tokens, tokens_at, fair, aging = row[11:15]
    control = Control(
        queue=queue,
        key=key,
        paused=bool(paused),
        gate=gate,
        concurrency=concurrency,
        rate=rate,
        per=per,
        burst=burst,
        fair=fair,
        aging=aging,
        state=_state(state),
        version=version,
        updated_at=at_us(updated_at),
    )
    bucket = None if tokens is None or tokens_at is None else Bucket(tokens, at_us(tokens_at))
    return control, bucket


def _limits(control: Control) -> bool:
    """True when ``control`` can hold a task back."""
    return control.paused or any(
        value is not None for value in (control.gate, control.concurrency, control.rate)
    )


def live_leases(conn: sqlite3.Connection, queue: str, now: int) -> dict[str, tuple[int, int]]:
    """Per key: how many tasks of ``queue`` with the key hold a live lease at ``now``, and
    the earliest end of those leases (microseconds)."""
    leases: dict[str, tuple[int, int]] = {}
    for key, count, earliest in conn.execute(SQL.in_use, {"queue": queue, "now": now}):
        if count:
            before_count, before_earliest = leases.get(key, (0, earliest))
            leases[key] = (before_count + count, min(before_earliest, earliest))
    return leases


def lapsed_lease_fits(conn: sqlite3.Connection, task_id: str, token: str, now: int) -> bool:
    """Whether the lease of ``task_id`` held with ``token`` may be extended at ``now``: a live
    lease (or a token that is not current: the extension's own fence says so) always, a
    lapsed one only into a free slot of every concurrency limit of its keys
    (``rdq.spi.slots_free``). Inside the extension's write transaction."""
    row = conn.execute(SQL.lease_holder, {"id": task_id, "token": token}).fetchone()
    if row is None or row[1] is None or row[1] > now:
        return True
    queue, _, handler_ref, raw_keys = row
    controls = {
        control.key: control
        for control, _ in map(control_from_row, conn.execute(SQL.queue_controls, {"queue": queue}))
        if control.concurrency is not None
    }
    if not controls:
        return True
    used = {key: count for key, (count, _) in live_leases(conn, queue, now).items()}
    return slots_free(controls, used, [QUEUE_KEY, handler_key(handler_ref), *decode_keys(raw_keys)])


def list_controls(conn: sqlite3.Connection, queue: str | None) -> list[Control]:
    """In one read snapshot: the control records of ``queue`` (of every queue for ``None``),
    by queue then key, with ``in_use`` counted at the store's now."""
    now = now_for_read(conn)
    if queue is None:
        rows = conn.execute(SQL.list_controls).fetchall()
    else:
        rows = conn.execute(SQL.queue_controls, {"queue": queue}).fetchall()
    leases: dict[str, dict[str, tuple[int, int]]] = {}
    out = []
    for row in rows:
        control, _ = control_from_row(row)
        if control.queue not in leases:
            leases[control.queue] = live_leases(conn, control.queue, now)
        used = leases[control.queue].get(control.key)
        out.append(msgspec.structs.replace(control, in_use=0 if used is None else used[0]))
    return out


def _found(conn: sqlite3.Connection, queue: str, key: str) -> Control | None:
    row = conn.execute(SQL.get_control, {"queue": queue, "key": key}).fetchone()
    return None if row is None else control_from_row(row)[0]


def put_control(conn: sqlite3.Connection, control: Control, expected_version: int) -> Control:
    """Inside a write transaction: store ``control`` over ``expected_version`` (the version
    is in the update's ``WHERE``); ``ControlConflict``, nothing changed, otherwise."""
    now = tick(conn)
    queue, key = control.queue, control.key
    current = _found(conn, queue, key)
    if (0 if current is None else current.version) != expected_version:
        raise ControlConflict(queue, key, current)
    state = _encode(control.state).decode()
    per = float(control.per)
    params = {
        "queue": queue,
        "key": key,
        "paused": int(control.paused),
        "gate": control.gate,
        "concurrency": control.concurrency,
        "rate": control.rate,
        "per": per,
        "burst": control.burst,
        "fair": control.fair,
        "aging": None if control.aging is None else float(control.aging),
        "state": state,
        "now": now,
    }
    if current is None:
        conn.execute(SQL.insert_control, params)
    else:
        refill = control.rate is None or (current.rate, current.per, current.bucket) != (
            control.rate,
            per,
            control.bucket,
        )
        cursor = conn.execute(
            SQL.update_control, {**params, "expected": expected_version, "refill": refill}
        )
        if cursor.rowcount != 1:  # cannot happen under the write lock; never a lost update
            raise ControlConflict(queue, key, _found(conn, queue, key))
    if not _limits(control):
        conn.execute(SQL.release_held, {"queue": queue, "key": key})
    return msgspec.structs.replace(
        control,
        per=per,
        state=_state(state),
        version=expected_version + 1,
        updated_at=at_us(now),
        in_use=None,
    )


def delete_control(conn: sqlite3.Connection, queue: str, key: str, expected_version: int) -> bool:
    """Inside a write transaction: delete the control over ``expected_version`` and release
    the tasks held under its key; False if there was none."""
    current = _found(conn, queue, key)
    if current is None:
        return False
    if current.version != expected_version:
        raise ControlConflict(queue, key, current)
    conn.execute(SQL.delete_control, {"queue": queue, "key": key, "expected": expected_version})
    conn.execute(SQL.release_held, {"queue": queue, "key": key})
    return True


def retry_now(conn: sqlite3.Connection, queue: str, task_ids: Sequence[str]) -> int:
    """Inside a write transaction: the listed PENDING tasks not yet due become due now."""
    now = tick(conn)
    ids = _encode(list(task_ids)).decode()
    cursor = conn.execute(SQL.retry_now, {"queue": queue, "ids": ids, "now": now})
    return cursor.rowcount
