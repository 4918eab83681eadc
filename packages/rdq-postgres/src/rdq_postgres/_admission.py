"""Admitting many tasks in one statement: the statement and its values, and the reading of its
result, independent of which connection runs it (the store's pool, or an application's own
connection for ``enqueue_in``). The tasks come checked by ``StorageBase``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import msgspec

from rdq.spi import FORMAT_VERSION, Envelope, first_of_each_id
from rdq_postgres._codec import (
    ENQUEUE_ARRAYS,
    IMPORT_ARRAYS,
    encode_json,
    enqueue_args,
    import_args,
    joined_keys,
    micros,
)
from rdq_postgres._queries import Queries, Statement

__all__ = ["Admission", "admission", "admission_in", "importing"]

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
