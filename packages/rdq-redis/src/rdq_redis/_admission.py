"""Admission (``enqueue``, ``enqueue_batch``, ``import_tasks``, and ``admit`` under a dedup
key): the admitting scripts (``enqueue.lua``, ``import_tasks.lua``, ``admit.lua`` with
``dedup_replace.lua``), their arguments built from the tasks, and their replies read back.

``admit.lua`` decides on the key and adds the task in one script, so of concurrent admissions
of one key exactly one adds a task. A replacement is a second step: the script hands back the
PENDING holder's body, the client puts the submission's payload and headers into it, and
``dedup_replace.lua`` writes it only while the holder is still PENDING with that body (else
the client reads again): a replacement changes the holder's data, never who holds the key.

On a single server one script call admits a whole batch and keeps the id index and the queue
registry itself, so a batch is all or nothing. On Redis Cluster the index and the registry
live in other slots than the queues' (see :mod:`rdq_redis._cluster`): the ids are reserved
and the queues registered first, then one script call per queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import msgspec

from rdq.errors import DedupConflict, IDConflict, StorageError
from rdq.spi import (
    STATUS_TIME_FIELDS,
    AdmitOutcome,
    Admitted,
    Dedup,
    DedupMode,
    Envelope,
    status_time,
)
from rdq_redis._args import micros
from rdq_redis._cluster import register_queues, reserve_ids
from rdq_redis._codec import TIME_FIELDS, attempts_json, envelope_body, error_arg, keys_text, to_us
from rdq_redis._connection import Client, LiveClient, Scripts
from rdq_redis._errors import translate_errors
from rdq_redis._keys import STATUS_SETS, QueueKeys, dedup_index_key, index_key, registry_key
from rdq_redis._url import RedisConfig

__all__ = [
    "admission",
    "admit",
    "admit_dedup",
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


_REPLACE_TRIES = 20


async def admit_dedup(
    scripts: Scripts,
    redis: LiveClient,
    config: RedisConfig,
    task: Envelope,
    dedup: Dedup,
    delay: timedelta | None,
) -> Admitted:
    """``admit``: ``admit.lua`` (with, on Cluster, the id and key indexes kept around it),
    then for a replacement ``dedup_replace.lua`` (see the module docstring)."""
    prefix = config.prefix
    qk = QueueKeys(prefix, task.queue)
    delay_us = micros(delay or timedelta(0))
    row = enqueue_row(task, qk, delay_us)
    window = "" if dedup.window is None else str(round(dedup.window * 1_000_000))
    max_age = "" if dedup.max_age is None else str(round(dedup.max_age * 1_000_000))
    cluster = config.cluster
    if cluster:
        await _cluster_checks(redis(), scripts, config, task, dedup)
    args = [
        "0" if cluster else "1",
        "" if cluster else registry_key(prefix),
        prefix,
        *row,
        dedup.key,
        dedup.mode.value,
        window,
        max_age,
    ]
    for _ in range(_REPLACE_TRIES):
        reply = await scripts.run("admit", [qk.levels], args)
        kind = reply[0].decode()
        if kind == "IDCONFLICT":
            raise IDConflict(reply[1].decode(), reply[2].decode())
        if kind == "DEDUPCONFLICT":
            raise DedupConflict(dedup.key, reply[2].decode(), reply[1].decode())
        holder, queue = reply[1].decode(), reply[2].decode()
        if kind != "replace":
            if kind == "added" and cluster:
                await _cluster_index(redis(), config, task, dedup)
            return Admitted(outcome=AdmitOutcome(kind), task_id=holder, queue=queue)
        old_body = reply[3]
        body = msgspec.json.decode(old_body)
        body["payload"] = task.payload
        body["headers"] = dict(task.headers)
        replace = [
            qk.base,
            holder,
            old_body,
            msgspec.json.encode(body),
            "1" if dedup.mode == DedupMode.DEBOUNCE else "0",
            row[4],
            delay_us,
            max_age,
            dedup.key,
            window,
            qk.wake,
        ]
        done = (await scripts.run("dedup_replace", [qk.levels], replace)).decode()
        if done == "replaced":
            return Admitted(outcome=AdmitOutcome.REPLACED, task_id=holder, queue=queue)
        if done == "skipped":
            return Admitted(outcome=AdmitOutcome.SKIPPED, task_id=holder, queue=queue)
    raise StorageError(f"dedup key {dedup.key!r}: its holder kept changing; try again")


async def _cluster_checks(
    client: Client, scripts: Scripts, config: RedisConfig, task: Envelope, dedup: Dedup
) -> None:
    """On Cluster, before the script: the id's queue, and the queue the key was last given in
    (DedupConflict while it is held there); the queue registered."""
    prefix = config.prefix
    with translate_errors(config.address):
        owner = _text(await client.get(index_key(prefix, task.id)))
        found = _text(await client.get(dedup_index_key(prefix, dedup.key)))
    if owner is not None and owner != task.queue:
        raise IDConflict(task.id, owner)
    elsewhere = found
    if elsewhere is not None and elsewhere != task.queue:
        other = QueueKeys(prefix, elsewhere)
        held = await scripts.run("dedup_held", [other.levels], [other.base, dedup.key])
        if held[0] == 1:
            raise DedupConflict(dedup.key, other.queue, held[1].decode())
    await register_queues(client, prefix, config.address, {task.queue})


async def _cluster_index(client: Client, config: RedisConfig, task: Envelope, dedup: Dedup) -> None:
    """On Cluster, after a task was added: its id and its key indexed (docs/redis.md says
    what the window between the two steps gives up)."""
    with translate_errors(config.address):
        await client.set(index_key(config.prefix, task.id), task.queue, nx=True)
        await client.set(dedup_index_key(config.prefix, dedup.key), task.queue)


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
