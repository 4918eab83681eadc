"""Admitting many tasks in one statement: validation, de-duplication, the statement's
arguments and the reading of its result, independent of which connection runs it (the
store's pool, or an application's own connection for ``enqueue_in``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import msgspec

from rdq.errors import IDConflict
from rdq.spi import FORMAT_VERSION, Envelope, limits
from rdq_postgres._codec import encode_json, enqueue_args, import_args, micros
from rdq_postgres._queries import Queries

__all__ = [
    "Admission",
    "admission",
    "admission_in",
    "importing",
    "stored_flags",
]

_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True)
class Admission:
    """One statement admitting ``tasks`` (each id once, first occurrence first)."""

    tasks: list[Envelope]
    query: str
    args: tuple[Any, ...]

    def stored(self, row: Mapping[str, Any] | Any) -> set[str]:
        """The ids the statement stored, from its ``present`` column."""
        present = set(row["present"] or ())
        return {task.id for task in self.tasks if task.id not in present}

    def queues(self, stored: set[str]) -> set[str]:
        """The queues that gained a task."""
        return {task.queue for task in self.tasks if task.id in stored}


def _unique(tasks: Sequence[Envelope]) -> list[Envelope]:
    """The first task of each id; ``IDConflict`` for an id given in two queues."""
    first_queue: dict[str, str] = {}
    unique: list[Envelope] = []
    for task in tasks:
        queue = first_queue.setdefault(task.id, task.queue)
        if len(first_queue) > len(unique):
            unique.append(task)
        elif queue != task.queue:
            raise IDConflict(task.id, queue)
    return unique


def admission(sql: Queries, tasks: Sequence[Envelope], delay: timedelta | None) -> Admission | None:
    """The statement that admits ``tasks`` as ``enqueue`` would, one by one (``None`` for no
    tasks). Every task is checked with ``limits.check_task`` first, in order, so a batch is
    refused exactly as the first bad ``enqueue`` would be."""
    limits.check_delay(delay)
    payloads: dict[int, str] = {}
    for task in tasks:
        limits.check_task(task)
        payloads[id(task)] = _encode(task.payload).decode()
    unique = _unique(tasks)
    if not unique:
        return None
    if all(_fresh(task) for task in unique):
        args: tuple[Any, ...] = (
            [task.id for task in unique],
            _compact([task.queue for task in unique]),
            _compact([task.handler_ref for task in unique]),
            [payloads[id(task)] for task in unique],
            [encode_json(task.headers) if task.headers else "{}" for task in unique]
            if any(task.headers for task in unique)
            else [],
            FORMAT_VERSION,
            micros(delay),
            _compact([task.priority for task in unique]),
        )
        return Admission(unique, sql.enqueue_batch_fresh, args)
    columns = zip(*(enqueue_args(task, payloads[id(task)]) for task in unique), strict=True)
    return Admission(unique, sql.enqueue_batch, (*map(list, columns), micros(delay)))


def admission_in(
    sql: Queries, tasks: Sequence[Envelope], delay: timedelta | None, *, notify: bool
) -> Admission | None:
    """The statement that admits ``tasks`` inside the caller's transaction (enqueue_in.sql):
    checked as ``admission`` checks them; an id held by another queue is reported, not
    raised."""
    limits.check_delay(delay)
    payloads = [_encode(limits.check_task(task).payload).decode() for task in tasks]
    encoded = {id(task): payload for task, payload in zip(tasks, payloads, strict=True)}
    unique = _unique(tasks)
    if not unique:
        return None
    columns = [
        list(column)
        for column in zip(*(enqueue_args(task, encoded[id(task)]) for task in unique), strict=True)
    ]
    args = (*columns[:13], micros(delay), notify, columns[13])
    return Admission(unique, sql.enqueue_in, args)


def importing(sql: Queries, tasks: Sequence[Envelope]) -> Admission | None:
    """The statement that stores ``tasks`` verbatim (``import_tasks``), each checked with
    ``limits.check_imported_tasks`` first."""
    unique = _unique(limits.check_imported_tasks(tasks))
    if not unique:
        return None
    columns = zip(*(import_args(task) for task in unique), strict=True)
    return Admission(unique, sql.import_tasks, tuple(map(list, columns)))


def stored_flags(tasks: Sequence[Envelope], stored: set[str]) -> list[bool]:
    """One "stored" flag per task given: True for the first occurrence of a stored id."""
    if len(stored) == len(tasks):
        return [True] * len(tasks)
    left = set(stored)
    flags = []
    for task in tasks:
        flags.append(task.id in left)
        left.discard(task.id)
    return flags


def _compact(values: list[Any]) -> list[Any]:
    """``values``, or only its first when all are the same (enqueue_batch_fresh.sql)."""
    first = values[0]
    return [first] if values.count(first) == len(values) else values


def _fresh(task: Envelope) -> bool:
    """True if ``task`` is new (what ``Client.submit`` builds): stored by
    ``enqueue_batch_fresh`` with constants for everything but names, priority, payload and
    headers."""
    return (
        task.attempt_count == 0
        and task.redrive_count == 0
        and not task.attempts
        and task.retry is None
        and task.next_attempt_at is None
        and task.format_version == FORMAT_VERSION
        and not task.extra
    )
