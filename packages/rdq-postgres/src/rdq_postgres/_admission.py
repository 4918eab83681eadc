"""Admission (``enqueue``, ``enqueue_batch``, ``import_tasks``, ``enqueue_in``, and ``admit``
under a dedup key): the statements that admit tasks, their values, the reading of their
results and the wake-ups they owe. ``admit`` is one call of ``admit_task()`` (migration 0011),
which serializes the admissions of one key under an advisory lock.

A batch is one statement (:class:`Admission`), whichever connection runs it: the store's pool,
or for ``enqueue_in`` an application's own connection, reached through
:mod:`rdq_postgres._outbox`. The tasks come checked by ``StorageBase``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import msgspec

from rdq.errors import DedupConflict, IDConflict
from rdq.spi import (
    FORMAT_VERSION,
    AdmitOutcome,
    Admitted,
    Dedup,
    DedupMode,
    Envelope,
    first_of_each_id,
    stored_flags,
)
from rdq_postgres._codec import (
    ENQUEUE_ARRAYS,
    ENQUEUE_FIELDS,
    IMPORT_ARRAYS,
    encode_json,
    enqueue_args,
    import_args,
    joined_keys,
    micros,
)
from rdq_postgres._connection import Database
from rdq_postgres._notify import Announcer
from rdq_postgres._outbox import driver_errors, runner_for
from rdq_postgres._queries import Queries, Statement

__all__ = [
    "Admission",
    "admission",
    "admission_in",
    "admit",
    "enqueue",
    "enqueue_batch",
    "enqueue_in",
    "import_tasks",
    "importing",
]

_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True)
class Admission:
    """One statement admitting ``tasks`` (each id once, first occurrence first) with the
    ``values`` of its parameters."""

    tasks: list[Envelope]
    statement: Statement
    values: dict[str, Any]

    def stored(self, row: Mapping[str, Any] | Any) -> set[str]:
        """The ids the statement stored, from its ``present`` column."""
        present = set(row["present"] or ())
        return {task.id for task in self.tasks if task.id not in present}

    def queues(self, stored: set[str]) -> set[str]:
        """The queues that gained a task."""
        return {task.queue for task in self.tasks if task.id in stored}


def _columns(names: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> dict[str, Any]:
    """One array parameter per name, from per-task rows of values in the order of ``names``."""
    return dict(zip(names, map(list, zip(*rows, strict=True)), strict=True))


def admission(sql: Queries, tasks: Sequence[Envelope], delay: timedelta | None) -> Admission:
    """The statement that admits ``tasks`` as ``enqueue`` would, one by one; ``IDConflict``
    for an id given in two queues of the batch."""
    unique = first_of_each_id(tasks)
    if all(_fresh(task) for task in unique):
        values: dict[str, Any] = {
            "ids": [task.id for task in unique],
            "queues": _compact([task.queue for task in unique]),
            "handler_refs": _compact([task.handler_ref for task in unique]),
            "payloads": [_encode(task.payload).decode() for task in unique],
            "headers": [encode_json(task.headers) if task.headers else "{}" for task in unique]
            if any(task.headers for task in unique)
            else [],
            "format_version": FORMAT_VERSION,
            "delay_us": micros(delay),
            "priorities": _compact([task.priority for task in unique]),
            "keys": _compact([joined_keys(task.keys) for task in unique]),
        }
        return Admission(unique, sql.enqueue_batch_fresh, values)
    values = _columns(ENQUEUE_ARRAYS, [enqueue_args(task) for task in unique])
    values["delay_us"] = micros(delay)
    return Admission(unique, sql.enqueue_batch, values)


def admission_in(
    sql: Queries, tasks: Sequence[Envelope], delay: timedelta | None, *, notify: bool
) -> Admission:
    """The statement that admits ``tasks`` inside the caller's transaction (enqueue_in.sql):
    an id held by another queue is reported, not raised."""
    unique = first_of_each_id(tasks)
    values = _columns(ENQUEUE_ARRAYS, [enqueue_args(task) for task in unique])
    values.update(delay_us=micros(delay), notify=notify)
    return Admission(unique, sql.enqueue_in, values)


def importing(sql: Queries, tasks: Sequence[Envelope]) -> Admission:
    """The statement that stores ``tasks`` verbatim (``import_tasks``)."""
    unique = first_of_each_id(tasks)
    return Admission(
        unique, sql.import_tasks, _columns(IMPORT_ARRAYS, list(map(import_args, unique)))
    )


def _compact(values: list[Any]) -> list[Any]:
    """``values``, or only its first when all are the same (enqueue_batch_fresh.sql)."""
    first = values[0]
    return [first] if values.count(first) == len(values) else values


def _fresh(task: Envelope) -> bool:
    """True if ``task`` is new (what ``Client.submit`` builds): stored by
    ``enqueue_batch_fresh`` with constants for everything but names, priority, keys, payload
    and headers."""
    return (
        task.attempt_count == 0
        and task.redrive_count == 0
        and not task.attempts
        and task.retry is None
        and task.next_attempt_at is None
        and task.format_version == FORMAT_VERSION
        and not task.extra
    )


async def enqueue(
    db: Database,
    sql: Queries,
    announcer: Announcer | None,
    task: Envelope,
    delay: timedelta | None,
) -> bool:
    """Admit one task (enqueue.sql): ``False`` for an id already in its queue, ``IDConflict``
    for an id another queue holds. With an ``announcer`` (NOTIFY on), the statement carries
    its own NOTIFY when the announcer is idle, else the announcer sends one."""
    values = dict(zip(ENQUEUE_FIELDS, enqueue_args(task), strict=True))
    carrying = announcer.carrying() if announcer is not None else nullcontext(False)
    with carrying as carried:
        stored = await db.fetch(sql.enqueue, **values, delay_us=micros(delay), notify=carried)
    if stored:
        if not carried and announcer is not None:
            announcer.announce((task.queue,))
        return True
    # The id is taken (the rare path: a second round trip to say by which queue).
    rows = await db.fetch(sql.existing_queue, id=task.id)
    if rows and rows[0]["queue"] != task.queue:
        raise IDConflict(task.id, rows[0]["queue"])
    return False


async def enqueue_batch(
    db: Database,
    sql: Queries,
    announcer: Announcer | None,
    tasks: list[Envelope],
    delay: timedelta | None,
) -> list[bool]:
    """Admit ``tasks`` as ``enqueue`` would, in one statement on the pool."""
    return await _admit(db, tasks, admission(sql, tasks, delay), announcer)


async def import_tasks(
    db: Database, sql: Queries, announcer: Announcer | None, tasks: list[Envelope]
) -> list[bool]:
    """Store ``tasks`` verbatim, in one statement on the pool."""
    return await _admit(db, tasks, importing(sql, tasks), announcer)


async def _admit(
    db: Database, tasks: list[Envelope], batch: Admission, announcer: Announcer | None
) -> list[bool]:
    """Run a batch admission statement on the pool. An id in another queue fails the
    whole statement (RQ409: nothing stored), raised as ``IDConflict``."""
    stored = batch.stored(await db.fetchrow(batch.statement, **batch.values))
    if announcer is not None:
        announcer.announce(batch.queues(stored))
    return stored_flags(tasks, stored)


async def enqueue_in(
    connection: object,
    sql: Queries,
    endpoint: str,
    tasks: list[Envelope],
    delay: timedelta | None,
    *,
    notify: bool,
) -> list[bool]:
    """``enqueue_in``'s statement (enqueue_in.sql) run on the application's ``connection``
    through :mod:`rdq_postgres._outbox` (see ``PostgresStorage._enqueue_in`` for the
    promise). An id another queue holds unadmits this call's own rows, then raises
    ``IDConflict``."""
    batch = admission_in(sql, tasks, delay, notify=notify)
    runner = await runner_for(connection)
    with driver_errors(endpoint):
        statement = batch.statement
        row = await runner.fetchrow(statement.text, statement.args(batch.values))
        stored = set(row["stored"] or ())
        if row["conflict_id"] is not None:
            if stored:  # our own rows, not yet visible to anyone else
                unadmit = sql.unadmit
                await runner.execute(unadmit.text, unadmit.args({"ids": sorted(stored)}))
            raise IDConflict(row["conflict_id"], row["conflict_queue"])
    return stored_flags(tasks, stored)


async def admit(
    db: Database,
    sql: Queries,
    announcer: Announcer | None,
    task: Envelope,
    dedup: Dedup,
    delay: timedelta | None,
) -> Admitted:
    """Admit ``task`` under ``dedup`` (admit.sql); a task added, or a holder made due sooner
    by a debounce, wakes its queue's listeners."""
    values = dict(zip(ENQUEUE_FIELDS, enqueue_args(task), strict=True))
    row = await db.fetchrow(
        sql.admit,
        **values,
        delay_us=micros(delay),
        dedup_key=dedup.key,
        dedup_mode=dedup.mode.value,
        window_us=_seconds_us(dedup.window),
        max_age_us=_seconds_us(dedup.max_age),
    )
    outcome, holder, queue = row["outcome"], row["task_id"], row["queue"]
    if outcome == "id_conflict":
        raise IDConflict(task.id, queue)
    if outcome == "dedup_conflict":
        raise DedupConflict(dedup.key, queue, holder)
    due = outcome == "added" or (outcome == "replaced" and dedup.mode == DedupMode.DEBOUNCE)
    if due and announcer is not None:
        announcer.announce((queue,))
    return Admitted(outcome=AdmitOutcome(outcome), task_id=holder, queue=queue)


def _seconds_us(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1_000_000)
