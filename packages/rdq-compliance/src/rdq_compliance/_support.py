"""Small helpers the clauses share: task factories, storage-clock readings and patient polling.

Nothing here reads the test process clock to decide due-ness: the storage's time is read
with ``Storage.now()`` or learned from what it reports (``claimed_at``, ``lease_expires_at``).
The process clock is only used to bound how long a helper keeps polling before it gives up.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any, TypeVar

from rdq.spi import (
    Attempt,
    AuditEntry,
    AuditFilter,
    Claimed,
    DLQFilter,
    Envelope,
    Outcome,
    Page,
    Storage,
    TaskFilter,
    envelope_to_builtins,
)
from rdq_compliance.testing import PATIENCE, eventually

__all__ = [
    "FAR_FUTURE",
    "LONG_LEASE",
    "PATIENCE",
    "SHORT_LEASE",
    "attempt",
    "claim_one",
    "claim_time",
    "clock_passes",
    "dead_tasks",
    "eventually",
    "list_all_audit",
    "list_all_tasks",
    "list_whole_dlq",
    "new_id",
    "new_queue",
    "new_task",
    "reclaim_after_expiry",
    "snapshot",
    "with_url_option",
]

T = TypeVar("T")

SHORT_LEASE = timedelta(seconds=0.3)
"""A lease that lapses quickly, for lease-recovery tests."""
LONG_LEASE = timedelta(minutes=10)
"""A lease no test outlives."""
FAR_FUTURE = timedelta(days=1)
"""A delay after which no test is still running."""


def with_url_option(url: str, name: str, value: str) -> str:
    """``url`` with the query option ``name=value`` added.

    Appended as text: ``urlunsplit`` would turn ``sqlite:////abs/path`` (an empty host and a
    path starting with ``//``) into ``sqlite://abs/path``."""
    base, _, fragment = url.partition("#")
    joined = f"{base}{'&' if '?' in base else '?'}{name}={value}"
    return f"{joined}#{fragment}" if fragment else joined


def new_queue(prefix: str = "kit") -> str:
    """A queue name no other test uses, so tests can share one server."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def new_id(prefix: str = "t") -> str:
    """A task id no other test uses (ids are unique across queues)."""
    return f"{prefix}-{uuid.uuid4().hex}"


def new_task(queue: str, task_id: str | None = None, **fields: Any) -> Envelope:
    """An envelope for ``queue`` with a fresh id, a plain handler_ref and a small payload."""
    fields.setdefault("handler_ref", "kit.handlers:noop")
    fields.setdefault("payload", {"n": 1})
    return Envelope(id=task_id or new_id(), queue=queue, **fields)


def nested(levels: int) -> Any:
    """A JSON value that nests arrays ``levels`` deep (an object at the bottom); 5000 levels
    is deeper than any JSON encoder or decoder recurses."""
    value: Any = {"n": 1}
    for _ in range(levels - 1):
        value = [value]
    return value


def attempt(
    number: int,
    outcome: Outcome = Outcome.FAILED,
    *,
    error_type: str | None = "KitError",
    error_message: str | None = "the handler failed",
    worker_id: str | None = "kit-worker",
) -> Attempt:
    """An attempt record as the engine would write it."""
    return Attempt(
        number=number,
        outcome=outcome,
        error_type=None if outcome is Outcome.SUCCEEDED else error_type,
        error_message=None if outcome is Outcome.SUCCEEDED else error_message,
        worker_id=worker_id,
    )


def snapshot(task: Envelope) -> dict[str, Any]:
    """Every field of ``task`` as plain data, unknown fields included, for equality checks."""
    return envelope_to_builtins(task)


def claim_time(claimed: Claimed, lease: timedelta) -> datetime:
    """When the storage made the claim, by its own clock."""
    expires = claimed.task.lease_expires_at
    assert expires is not None, "a claimed task must carry lease_expires_at"
    return expires - lease


async def clock_passes(storage: Storage, at: datetime) -> datetime:
    """Wait until ``storage.now()`` reads ``at`` or later; return that reading."""

    async def probe() -> datetime | None:
        now = await storage.now()
        return now if now >= at else None

    return await eventually(probe, f"the storage clock to pass {at.isoformat()}")


async def claim_one(storage: Storage, queue: str, lease: timedelta = LONG_LEASE) -> Claimed:
    """Claim exactly one task of ``queue``, which must be due now."""
    claimed = await storage.claim_due(queue, 1, lease)
    assert len(claimed) == 1, f"expected one due task in {queue!r}, claim_due gave {claimed!r}"
    return claimed[0]


async def reclaim_after_expiry(
    storage: Storage, queue: str, lease: timedelta = LONG_LEASE, *, worker_id: str | None = None
) -> Claimed:
    """Poll ``claim_due(queue, 1)`` until a task comes back (a lapsed lease), and return it."""

    # a claim names its worker only when asked to (a version-1 store takes no worker_id)
    holder = {} if worker_id is None else {"worker_id": worker_id}

    async def probe() -> Claimed | None:
        claimed = await storage.claim_due(queue, 1, lease, **holder)
        return claimed[0] if claimed else None

    return await eventually(probe, f"an expired lease in {queue!r} to be reclaimed")


async def dead_tasks(
    storage: Storage,
    queue: str,
    count: int,
    *,
    error_type: str = "KitError",
    handler_ref: str = "kit.handlers:noop",
    prefix: str = "dead",
) -> list[str]:
    """Enqueue ``count`` tasks, claim them and dead-letter each one; return their ids in the
    order they were dead-lettered."""
    ids = [new_id(prefix) for _ in range(count)]
    for task_id in ids:
        await storage.enqueue(new_task(queue, task_id, handler_ref=handler_ref))
    order: list[str] = []
    for _ in ids:
        # one at a time, so the tasks are dead-lettered one after another
        claimed = await claim_one(storage, queue)
        assert claimed.task.id in ids, f"claim_due returned a task of another test: {claimed!r}"
        await storage.dead_letter(
            claimed.task.id,
            claimed.token,
            attempt(claimed.task.attempt_count + 1, Outcome.PERMANENT, error_type=error_type),
        )
        order.append(claimed.task.id)
    return order


async def list_whole_dlq(
    storage: Storage,
    queue: str,
    dlq_filter: DLQFilter | None = None,
    *,
    limit: int = 1000,
    include_attempts: bool = False,
) -> list[Envelope]:
    """Every DLQ task of ``queue``, following cursors page by page (at most 10 000 pages)."""
    out: list[Envelope] = []
    cursor: str | None = None
    for _ in range(10_000):
        tasks, cursor = await storage.dlq_list(
            queue, dlq_filter, Page(limit=limit, cursor=cursor, include_attempts=include_attempts)
        )
        out.extend(tasks)
        if cursor is None:
            return out
    raise AssertionError(f"dlq_list of {queue!r} never returned a last page")


async def list_all_tasks(
    storage: Storage,
    queue: str,
    task_filter: TaskFilter,
    *,
    limit: int = 1000,
    include_attempts: bool = False,
) -> list[Envelope]:
    """Every task ``list_tasks`` lists for ``task_filter``, following cursors page by page."""
    out: list[Envelope] = []
    cursor: str | None = None
    for _ in range(10_000):
        tasks, cursor = await storage.list_tasks(
            queue,
            task_filter,
            Page(limit=limit, cursor=cursor, include_attempts=include_attempts),
        )
        out.extend(tasks)
        if cursor is None:
            return out
    raise AssertionError(f"list_tasks of {queue!r} never returned a last page")


async def list_all_audit(
    storage: Storage, audit_filter: AuditFilter | None, *, limit: int = 1000
) -> list[AuditEntry]:
    """Every audit entry ``list_audit`` lists for ``audit_filter``, page by page."""
    out: list[AuditEntry] = []
    cursor: str | None = None
    for _ in range(10_000):
        entries, cursor = await storage.list_audit(audit_filter, Page(limit=limit, cursor=cursor))
        out.extend(entries)
        if cursor is None:
            return out
    raise AssertionError("list_audit never returned a last page")
