"""The arguments the scripts take, built from the contract's types, and their replies read
back into them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from rdq.errors import IDConflict, StorageError, ValidationError
from rdq.spi import (
    STATUS_TIME_FIELDS,
    Attempt,
    Claimed,
    Completion,
    DLQFilter,
    DLQGroup,
    Envelope,
    Selector,
    Stats,
    Status,
    group_order,
    limits,
    status_time,
)
from rdq_redis._codec import (
    TIME_FIELDS,
    attempt_json,
    attempts_json,
    envelope_body,
    envelope_from_hash,
    error_arg,
    from_us,
    hash_pairs,
    keys_text,
    score_us,
    to_us,
)
from rdq_redis._keys import STATUS_SETS, QueueKeys, index_key

__all__ = [
    "admission",
    "admitted",
    "claimed",
    "completion_batches",
    "dlq_groups",
    "enqueue_row",
    "group_label",
    "holds_tasks",
    "import_row",
    "micros",
    "resolve_args",
    "selector_args",
    "stats",
    "token_queue",
]

_US = timedelta(microseconds=1)


def micros(delta: timedelta) -> int:
    return delta // _US


def token_queue(token: str) -> str | None:
    """The queue a claim token of this store names (``<queue>/<random>.<n>``), or None."""
    queue, _, _ = token.rpartition("/")
    try:
        return limits.check_queue(queue)
    except ValidationError:
        return None


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


def _filter_args(dlq_filter: DLQFilter | None) -> list[str]:
    """(min score, max score, handler filter, error filter) for ``select_ids``."""
    f = dlq_filter or DLQFilter()
    low = "-inf" if f.dead_lettered_after is None else str(to_us(f.dead_lettered_after))
    high = "+inf" if f.dead_lettered_before is None else f"({to_us(f.dead_lettered_before)}"
    return [low, high, error_arg(f.handler_ref), error_arg(f.error_type)]


def selector_args(selector: Selector) -> list[str]:
    if selector.ids is not None:
        return ["ids", *selector.ids]
    return ["filter", *_filter_args(selector.filter)]


def group_label(label: bytes) -> tuple[str, str | None]:
    """(handler_ref, error_type) of a DLQ group label: ``<len>:<handler_ref>[=<error_type>]``
    (the length counts bytes)."""
    length, _, rest = label.partition(b":")
    size = int(length)
    handler, error = rest[:size], rest[size:]
    text = handler.decode("utf-8", "replace")
    return text, error[1:].decode("utf-8", "replace") if error else None


def admission(
    prefix: str, registry: str, tasks: Sequence[Envelope], rows: Sequence[list[Any]]
) -> tuple[list[str], list[Any]]:
    """The keys and arguments of one admitting script call (``enqueue.lua`` or
    ``import_tasks.lua``) on a single server, where the script keeps the id index and the
    queue registry; ``rows`` holds each task's values (:func:`enqueue_row`,
    :func:`import_row`). On Cluster, :func:`rdq_redis._cluster.admit_on_cluster` builds them."""
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


def claimed(queue: str, reply: Any) -> list[Claimed]:
    """``claim_due.lua``'s reply (id, token and hash of each task claimed) as claims."""
    return [
        Claimed(
            envelope_from_hash(
                hash_pairs(fields), task_id=task_id.decode(), queue=queue, status=Status.IN_FLIGHT
            ),
            token.decode(),
        )
        for task_id, token, fields in reply
    ]


def dlq_groups(reply: Any) -> list[DLQGroup]:
    """``dlq_groups.lua``'s reply as the contract's groups, in its order."""
    groups = []
    for label, count, first, last in reply:
        handler_ref, error_type = group_label(label)
        groups.append(
            DLQGroup(
                handler_ref=handler_ref,
                error_type=error_type,
                count=int(count),
                first_dead_lettered_at=from_us(score_us(first)),
                last_dead_lettered_at=from_us(score_us(last)),
            )
        )
    groups.sort(key=group_order)
    return groups


def stats(queue: str, reply: Any) -> Stats:
    """``stats.lua``'s reply as a snapshot (every count exact: nothing is estimated)."""
    now_us = int(reply[0])
    oldest = reply[6]
    return Stats(
        queue=queue,
        pending=int(reply[1]),
        in_flight=int(reply[2]),
        dlq_depth=int(reply[3]),
        succeeded=int(reply[4]),
        cancelled=int(reply[5]),
        oldest_pending_age=(now_us - score_us(oldest)) / 1e6 if oldest else None,
        as_of=from_us(now_us),
    )


def resolve_args(
    qk: QueueKeys, task_id: str, token: str, status: str, attempt: Attempt, next_at_us: str
) -> list[Any]:
    """The values ``resolve.lua`` reads."""
    return [
        qk.base,
        task_id,
        token,
        status,
        attempt_json(attempt),
        error_arg(attempt.error_type),
        next_at_us,
        qk.wake,
    ]


def completion_batches(
    completions: Sequence[Completion], prefix: str, cluster: bool
) -> list[tuple[list[int], list[str], list[Any]]]:
    """The ``complete_many.lua`` calls for ``completions`` as (positions, keys, args): one for
    all of them on a single server, one per queue (slot) on Cluster. A completion whose token
    names no queue of this store (so holds no claim) is in none."""
    groups: dict[str, list[int]] = {}
    queue_keys: dict[str, QueueKeys] = {}  # by the token's queue part: one per queue
    item_keys: list[QueueKeys | None] = []
    for i, item in enumerate(completions):
        named = item.token.rpartition("/")[0]
        qk = queue_keys.get(named)
        if qk is None:
            queue = token_queue(item.token)
            if queue is not None:
                qk = queue_keys[named] = QueueKeys(prefix, queue)
        item_keys.append(qk)
        if qk is not None:
            groups.setdefault(qk.queue if cluster else "", []).append(i)
    batches = []
    for positions in groups.values():
        args: list[Any] = [len(positions)]
        keys: list[str] = []
        for i in positions:
            item, qk = completions[i], item_keys[i]
            assert qk is not None  # grouped above
            keys = keys or [qk.levels]
            args += [
                qk.base,
                item.task_id,
                item.token,
                attempt_json(item.attempt),
                error_arg(item.attempt.error_type),
            ]
        batches.append((positions, keys, args))
    return batches


def holds_tasks(stats: Stats) -> bool:
    """True if the snapshot counts a task in any status."""
    counts = (stats.pending, stats.in_flight, stats.dlq_depth, stats.succeeded, stats.cancelled)
    return any(counts)
