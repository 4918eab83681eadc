"""The arguments the scripts of ``_store``'s operations take (leases, resolutions, the DLQ,
stats), built from the contract's types, and their replies read back into them; the claim
token's queue. Those of admission are in :mod:`rdq_redis._admission`, the claim's in
:mod:`rdq_redis._claims`, those of control records and the fleet in :mod:`rdq_redis._controls`
and :mod:`rdq_redis._fleet`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from rdq.errors import ValidationError
from rdq.spi import (
    Attempt,
    Completion,
    DLQFilter,
    DLQGroup,
    Selector,
    Stats,
    bounds,
    group_order,
)
from rdq_redis._codec import (
    attempt_json,
    error_arg,
    from_us,
    score_us,
    to_us,
)
from rdq_redis._keys import QueueKeys

__all__ = [
    "completion_batches",
    "dlq_groups",
    "group_label",
    "holds_tasks",
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
        return bounds.check_queue(queue)
    except ValidationError:
        return None


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
    names no queue of this store (so holds no claim) is in none, and so is one that discards
    its task (see :func:`discard_batches`)."""
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
        if qk is not None and not item.discard:
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


def discard_batches(
    completions: Sequence[Completion], prefix: str
) -> list[tuple[list[int], QueueKeys, list[str]]]:
    """The ``discard_many.lua`` calls for the completions that discard their task, one per
    queue (the queue the token names), as (positions, the queue's keys, id and token of each
    item). A completion whose token names no queue of this store is in none."""
    groups: dict[str, list[int]] = {}
    for i, item in enumerate(completions):
        if item.discard and (queue := token_queue(item.token)) is not None:
            groups.setdefault(queue, []).append(i)
    return [
        (
            positions,
            QueueKeys(prefix, queue),
            [value for i in positions for value in (completions[i].task_id, completions[i].token)],
        )
        for queue, positions in groups.items()
    ]


def holds_tasks(stats: Stats) -> bool:
    """True if the snapshot counts a task in any status."""
    counts = (stats.pending, stats.in_flight, stats.dlq_depth, stats.succeeded, stats.cancelled)
    return any(counts)
