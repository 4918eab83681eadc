"""Admission (``enqueue``, ``enqueue_batch``, ``import_tasks``): the admitting scripts
(``enqueue.lua``, ``import_tasks.lua``), their arguments built from the tasks, and their
replies read back.

On a single server one script call admits a whole batch and keeps the id index and the queue
registry itself, so a batch is all or nothing. On Redis Cluster the index and the registry
live in other slots than the queues' (see :mod:`rdq_redis._cluster`): the ids are reserved
and the queues registered first, then one script call per queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from rdq.errors import IDConflict, StorageError
from rdq.spi import STATUS_TIME_FIELDS, Envelope, status_time
from rdq_redis._args import micros
from rdq_redis._cluster import register_queues, reserve_ids
from rdq_redis._codec import TIME_FIELDS, attempts_json, envelope_body, error_arg, keys_text, to_us
from rdq_redis._connection import Client, LiveClient, Scripts
from rdq_redis._keys import STATUS_SETS, QueueKeys, index_key, registry_key
from rdq_redis._url import RedisConfig

__all__ = [
    "admission",
    "admit",
    "admit_on_cluster",
    "admitted",
    "enqueue_row",
    "enqueue_rows",
    "import_row",
    "import_rows",
]


def enqueue_rows(
    tasks: Sequence[Envelope], prefix: str, delay: timedelta | None
) -> list[list[Any]]:
    """Each task's values for ``enqueue.lua`` (:func:`enqueue_row`)."""
    delay_us = micros(delay or timedelta(0))
    return [enqueue_row(task, QueueKeys(prefix, task.queue), delay_us) for task in tasks]


def import_rows(tasks: Sequence[Envelope], prefix: str) -> list[list[Any]]:
    """Each task's values for ``import_tasks.lua`` (:func:`import_row`)."""
    return [import_row(task, QueueKeys(prefix, task.queue)) for task in tasks]


async def admit(
    scripts: Scripts,
    redis: LiveClient,
    config: RedisConfig,
    script: str,
    tasks: list[Envelope],
    rows: list[list[Any]],
) -> list[bool]:
    """Run an admitting script (``enqueue`` or ``import_tasks``): one call on a single
    server; on Cluster the ids are reserved and the queues registered first, then one call
    per queue."""
    if not config.cluster:
        keys, args = admission(config.prefix, registry_key(config.prefix), tasks, rows)
        return admitted(await scripts.run(script, keys, args))
    return await admit_on_cluster(
        redis(), scripts, config.prefix, config.address, script, tasks, rows
    )


def enqueue_row(task: Envelope, qk: QueueKeys, delay_us: int) -> list[Any]:
    """The 14 per-task values ``enqueue.lua`` reads."""
    last_error = task.attempts[-1].error_type if task.attempts else None
    return [
        task.queue,
        task.id,
        qk.base,
        envelope_body(task),
        "" if task.next_attempt_at is None else str(to_us(task.next_attempt_at)),
        delay_us,
        task.attempt_count,
        task.redrive_count,
        attempts_json(task.attempts),
        task.handler_ref,
        error_arg(last_error),
        qk.wake,
        task.priority,
        keys_text(task.keys),
    ]


def import_row(task: Envelope, qk: QueueKeys) -> list[Any]:
    """The per-task values ``import_tasks.lua`` reads: where the task is indexed, then every
    hash field it is stored with."""
    fields: list[Any] = [
        "body",
        envelope_body(task),
        "status",
        str(task.status),
        "attempt_count",
        task.attempt_count,
        "redrive_count",
        task.redrive_count,
        "attempts",
        attempts_json(task.attempts),
        "handler_ref",
        task.handler_ref,
        "priority",
        task.priority,
    ]
    last_error = task.attempts[-1].error_type if task.attempts else None
    if last_error is not None:
        fields += ["error_type", last_error]
    if task.claimed_by is not None:
        fields += ["claimed_by", task.claimed_by]
    if task.keys:
        fields += ["keys", keys_text(task.keys)]
    for name in TIME_FIELDS:
        at = getattr(task, name)
        if at is not None:
            fields += [name, str(to_us(at))]
    at = status_time(task)
    return [
        task.queue,
        task.id,
        qk.base,
        STATUS_SETS[task.status],
        task.priority,
        "" if at is None else str(to_us(at)),
        STATUS_TIME_FIELDS[task.status],
        qk.wake,
        len(fields) // 2,
        *fields,
    ]


def admission(
    prefix: str, registry: str, tasks: Sequence[Envelope], rows: Sequence[list[Any]]
) -> tuple[list[str], list[Any]]:
    """The keys and arguments of one admitting script call (``enqueue.lua`` or
    ``import_tasks.lua``) on a single server, where the script keeps the id index and the
    queue registry; ``rows`` holds each task's values (:func:`enqueue_row`,
    :func:`import_row`). On Cluster, :func:`admit_on_cluster` builds them."""
    keys: list[str] = []
    args: list[Any] = [len(tasks), "1", registry]
    for task, row in zip(tasks, rows, strict=True):
        qk = QueueKeys(prefix, task.queue)
        keys += [qk.levels, qk.task(task.id), index_key(prefix, task.id)]
        args += row
    return keys, args


def admitted(reply: Any) -> list[bool]:
    """The per-task "stored" flags of an admitting script, or its ``IDConflict``."""
    if reply[0] == b"IDCONFLICT":
        raise IDConflict(reply[1].decode(), reply[2].decode())
    if reply[0] != b"OK":
        raise StorageError(f"unexpected reply from an admitting script: {reply!r}")
    return [flag == 1 for flag in reply[1]]


async def admit_on_cluster(
    client: Client,
    scripts: Scripts,
    prefix: str,
    address: str,
    script: str,
    tasks: Sequence[Envelope],
    rows: Sequence[list[Any]],
) -> list[bool]:
    """Run an admitting script (``enqueue`` or ``import_tasks``, one argument row per task)
    on Cluster: reserve the ids and register the queues, then one script call per queue."""
    await reserve_ids(client, prefix, address, tasks)
    await register_queues(client, prefix, address, {t.queue for t in tasks})
    by_queue: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        by_queue.setdefault(task.queue, []).append(i)
    stored = [False] * len(tasks)
    for queue, positions in by_queue.items():
        qk = QueueKeys(prefix, queue)
        keys: list[str] = []
        args: list[Any] = [len(positions), "0", ""]
        for i in positions:
            keys += [qk.levels, qk.task(tasks[i].id)]
            args += rows[i]
        flags = admitted(await scripts.run(script, keys, args))
        for i, flag in zip(positions, flags, strict=True):
            stored[i] = flag
    return stored
