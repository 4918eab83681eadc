"""The msgspec models of the storage contract: the envelope and everything the SPI passes around."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

import msgspec

from rdq.errors import ValidationError

__all__ = [
    "FORMAT_VERSION",
    "Attempt",
    "Capabilities",
    "Claimed",
    "Completion",
    "DLQFilter",
    "Envelope",
    "Outcome",
    "Page",
    "RetryOverride",
    "Selector",
    "Stats",
    "Status",
]

FORMAT_VERSION = 1
"""The envelope format this release writes. Readers keep fields they do not know."""


class Status(enum.StrEnum):
    """Where a task is in its life."""

    PENDING = "PENDING"
    IN_FLIGHT = "IN_FLIGHT"
    SUCCEEDED = "SUCCEEDED"
    DEAD = "DEAD"


class Outcome(enum.StrEnum):
    """How one attempt ended."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    PERMANENT = "PERMANENT"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    INTERRUPTED = "INTERRUPTED"


class Attempt(msgspec.Struct, kw_only=True, frozen=True):
    """The record of one attempt. Storage appends it; only the engine writes its contents,
    except ``LEASE_EXPIRED`` records, which the storage writes itself when it reclaims."""

    number: int
    outcome: Outcome
    error_type: str | None = None
    error_message: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    worker_id: str | None = None


class RetryOverride(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """A per-task override of its queue's retry settings. Opaque to storage; the engine
    resolves it at claim time (task override > queue config > defaults). Durations in seconds."""

    max_attempts: int | None = None
    backoff: str | None = None
    base: float | None = None
    cap: float | None = None
    timeout: float | None = None


class Envelope(msgspec.Struct, kw_only=True):
    """One task, as stored and as sent over the wire.

    Field names are the contract. ``extra`` holds fields this release does not know (written
    by a newer producer): they are encoded back flat beside the known fields, so nothing a
    newer node wrote is lost by an older one. Use :func:`rdq.spi.encode_envelope` and
    :func:`rdq.spi.decode_envelope` to get that behaviour; timestamps are timezone-aware UTC.
    """

    id: str
    queue: str
    handler_ref: str
    payload: Any = None
    headers: dict[str, str] = {}
    status: Status = Status.PENDING
    attempt_count: int = 0
    redrive_count: int = 0
    attempts: list[Attempt] = []
    created_at: datetime | None = None
    next_attempt_at: datetime | None = None
    lease_expires_at: datetime | None = None
    completed_at: datetime | None = None
    dead_lettered_at: datetime | None = None
    retry: RetryOverride | None = None
    format_version: int = FORMAT_VERSION
    extra: dict[str, Any] = {}


class Claimed(msgspec.Struct, frozen=True):
    """A task handed out by ``claim_due`` with the fencing token that proves the lease.

    ``task.lease_expires_at`` is the lease's end by the storage clock; the claim was made at
    ``task.lease_expires_at - lease``, which is how the engine learns the storage's time."""

    task: Envelope
    token: str


class Capabilities(msgspec.Struct, kw_only=True, frozen=True):
    """Optional accelerations a backend offers. The engine works without any of them."""

    notify: bool = False
    """``wait_due(queue, timeout)`` blocks until a task may be due."""
    filter_pushdown: bool = False
    """DLQ filters are evaluated by the backend (listing, redrive and purge by filter)."""
    batch_enqueue: bool = False
    """``enqueue_batch(tasks)`` admits many tasks in one round trip."""
    batch_complete: bool = False
    """``complete_many(completions)`` resolves many claims in one round trip, fenced per task."""


class Completion(msgspec.Struct, frozen=True):
    """One successful attempt to record with ``complete_many``: the task, its claim token and
    the attempt record."""

    task_id: str
    token: str
    attempt: Attempt


class DLQFilter(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """Selects dead-lettered tasks. Every field that is set must match; an empty filter
    matches every DLQ task of the queue.

    ``error_type`` matches the error type of the attempt that dead-lettered the task (the last
    one); ``dead_lettered_after`` is inclusive and ``dead_lettered_before`` exclusive."""

    error_type: str | None = None
    handler_ref: str | None = None
    dead_lettered_after: datetime | None = None
    dead_lettered_before: datetime | None = None

    def matches(self, task: Envelope) -> bool:
        """True if ``task`` (a DLQ task) is selected by this filter."""
        if self.handler_ref is not None and task.handler_ref != self.handler_ref:
            return False
        if self.error_type is not None:
            last = task.attempts[-1] if task.attempts else None
            if last is None or last.error_type != self.error_type:
                return False
        at = task.dead_lettered_at
        if self.dead_lettered_after is not None and (at is None or at < self.dead_lettered_after):
            return False
        return not (
            self.dead_lettered_before is not None
            and (at is None or at >= self.dead_lettered_before)
        )


class Page(msgspec.Struct, kw_only=True, frozen=True):
    """Which page of the DLQ to read: up to ``limit`` tasks after the opaque ``cursor``
    returned by the previous page (``None`` for the first page)."""

    limit: int = 100
    cursor: str | None = None
    include_attempts: bool = False


class Selector(msgspec.Struct, kw_only=True, frozen=True):
    """What a redrive or purge acts on: an explicit id set *or* a DLQ filter, never both."""

    ids: list[str] | None = None
    filter: DLQFilter | None = None

    def __post_init__(self) -> None:
        if self.ids is not None and self.filter is not None:
            raise ValidationError("give either ids or filter, not both", field="selector")
        if self.ids is None and self.filter is None:
            raise ValidationError("give either ids or filter", field="selector")

    @classmethod
    def by_ids(cls, *ids: str) -> Selector:
        return cls(ids=list(ids))

    @classmethod
    def by_filter(cls, dlq_filter: DLQFilter | None = None) -> Selector:
        return cls(filter=dlq_filter or DLQFilter())


class Stats(msgspec.Struct, kw_only=True, frozen=True):
    """A per-queue snapshot taken by the storage at ``as_of`` (its own clock).

    ``pending`` counts PENDING tasks (due or not), ``in_flight`` IN_FLIGHT ones (expired leases
    included), ``oldest_pending_age`` is how long (seconds) the longest-waiting *due* PENDING
    task has been due, or ``None`` when no PENDING task is due."""

    queue: str
    pending: int
    in_flight: int
    dlq_depth: int
    succeeded: int
    oldest_pending_age: float | None
    as_of: datetime
