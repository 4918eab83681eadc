"""The defaults of operations added after contract version 1, built on version-1 operations
only (correct, not fast). :class:`~rdq.spi.StorageBase` uses them when a store does not
implement the operation itself, and so does the adapter that serves a store implementing the
bare protocol (:func:`rdq.spi.adapt`)."""

from __future__ import annotations

import contextlib
import secrets
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from rdq.errors import NotFound, StaleClaim
from rdq.spi import bounds
from rdq.spi._helpers import group_order
from rdq.spi._models import (
    Attempt,
    Completion,
    DLQGroup,
    Envelope,
    Outcome,
    Page,
    Selector,
    Status,
    status_time,
)

if TYPE_CHECKING:
    from rdq.spi._protocol import Storage

__all__ = [
    "CLOCK_QUEUE",
    "complete_each",
    "expire_by_purge",
    "groups_by_paging",
    "now_by_probe",
]

CLOCK_QUEUE = "rdq-clock"
"""The queue of the probe tasks :func:`now_by_probe` reads the store's clock with."""
_PROBE_LEASE = timedelta(seconds=30)


async def now_by_probe(storage: Storage) -> datetime:
    """The store's clock read through a probe task: enqueue one in :data:`CLOCK_QUEUE`,
    claim the queue's due probes (a claim's time is its ``lease_expires_at - lease``),
    complete them and purge the completed ones. Five round trips, and nothing is left
    behind but probes whose prober died between two of them, which the next probe clears."""
    probe = Envelope(
        id=f"clock-{secrets.token_hex(8)}", queue=CLOCK_QUEUE, handler_ref="rdq.clock-probe"
    )
    await storage.enqueue(probe)
    claimed = await storage.claim_due(CLOCK_QUEUE, bounds.MAX_LIMIT, _PROBE_LEASE)
    now: datetime | None = None
    for claim in claimed:
        expires = claim.task.lease_expires_at
        if expires is not None:
            at = expires - _PROBE_LEASE
            now = at if now is None else max(now, at)
        done = Attempt(number=claim.task.attempt_count + 1, outcome=Outcome.SUCCEEDED)
        with contextlib.suppress(StaleClaim, NotFound):  # its lease lapsed to another prober
            await storage.complete(claim.task.id, claim.token, done)
    if now is None:  # another prober claimed ours first: its admission time will do
        created = (await storage.get(probe.id)).created_at
        if created is None:
            raise RuntimeError(f"{type(storage).__name__} stored a task without created_at")
        now = created
    await storage.purge_succeeded(CLOCK_QUEUE, now + timedelta(days=1))
    return now


async def groups_by_paging(storage: Storage, queue: str) -> list[DLQGroup]:
    """``dlq_groups`` by paging through the whole DLQ with attempts. A task read back without
    ``dead_lettered_at`` (a corrupt one) is counted all the same, at its ``created_at``; a
    group none of whose tasks has either time is dated by the store's ``now()``."""
    counts: Counter[tuple[str, str | None]] = Counter()
    first: dict[tuple[str, str | None], datetime] = {}
    last: dict[tuple[str, str | None], datetime] = {}
    cursor: str | None = None
    while True:
        tasks, cursor = await storage.dlq_list(
            queue, None, Page(limit=bounds.MAX_LIMIT, cursor=cursor, include_attempts=True)
        )
        for task in tasks:
            error_type = task.attempts[-1].error_type if task.attempts else None
            key = (task.handler_ref, error_type)
            counts[key] += 1
            at = task.dead_lettered_at or task.created_at
            if at is not None:
                first[key] = min(first.get(key, at), at)
                last[key] = max(last.get(key, at), at)
        if cursor is None:
            break
    undated = [key for key in counts if key not in first]
    if undated:
        now = await storage.now()
        for key in undated:
            first[key] = last[key] = now
    groups = [
        DLQGroup(
            handler_ref=handler_ref,
            error_type=error_type,
            count=count,
            first_dead_lettered_at=first[(handler_ref, error_type)],
            last_dead_lettered_at=last[(handler_ref, error_type)],
        )
        for (handler_ref, error_type), count in counts.items()
    ]
    groups.sort(key=group_order)
    return groups


async def complete_each(
    storage: Storage, completions: Sequence[Completion]
) -> list[StaleClaim | NotFound | None]:
    """``complete_many`` as one ``complete`` per item."""
    results: list[StaleClaim | NotFound | None] = []
    for item in completions:
        try:
            if item.discard:
                await storage.complete(item.task_id, item.token, item.attempt, discard=True)
            else:  # a store of an earlier contract takes no discard
                await storage.complete(item.task_id, item.token, item.attempt)
        except (StaleClaim, NotFound) as exc:
            results.append(exc)
        else:
            results.append(None)
    return results


async def expire_by_purge(
    storage: Storage, queue: str, task_ids: Sequence[str], before: datetime
) -> int:
    """``expire_tasks`` from version-1 operations: ``get`` each id, ``purge`` the DEAD and
    CANCELLED ones of ``queue`` finished before ``before`` by ids, and ``purge_succeeded``
    up to just after the latest listed SUCCEEDED one.

    Not atomic per task: a task redriven and dead-lettered again between its ``get`` and the
    ``purge`` is deleted all the same, and ``purge_succeeded`` also deletes SUCCEEDED and
    CANCELLED tasks finished before the listed ones that were never listed (the engine reads
    them in order of that time, so only a task imported meanwhile with an older time)."""
    by_id: list[str] = []
    succeeded_until: datetime | None = None
    for task_id in dict.fromkeys(task_ids):
        try:
            task = await storage.get(task_id)
        except NotFound:
            continue
        if task.queue != queue or task.status not in _FINISHED:
            continue
        at = status_time(task)
        if at is None or at >= before:
            continue
        if task.status == Status.SUCCEEDED:
            succeeded_until = at if succeeded_until is None else max(succeeded_until, at)
        else:
            by_id.append(task_id)
    expired = await storage.purge(queue, Selector(ids=by_id)) if by_id else 0
    if succeeded_until is not None:
        cutoff = min(before, succeeded_until + timedelta(microseconds=1))
        expired += await storage.purge_succeeded(queue, cutoff)
    return expired


_FINISHED = (Status.DEAD, Status.SUCCEEDED, Status.CANCELLED)
