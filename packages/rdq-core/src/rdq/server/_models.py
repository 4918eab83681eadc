"""The request and response bodies of the HTTP API (they also generate its OpenAPI document)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from rdq.spi import Outcome, RetryOverride, Status, limits

__all__ = [
    "ActionRequest",
    "ActionResult",
    "AttemptDoc",
    "DLQPage",
    "FilterRequest",
    "QueueList",
    "StatsDoc",
    "SubmitRequest",
    "TaskDoc",
]

TaskId = Annotated[
    str, Meta(min_length=1, max_length=limits.MAX_ID_LENGTH, pattern=r"^[A-Za-z0-9._\-:@+=~]+$")
]
QueueName = Annotated[
    str,
    Meta(
        min_length=1, max_length=limits.MAX_QUEUE_LENGTH, pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-:]*$"
    ),
]
HandlerRef = Annotated[
    str,
    Meta(min_length=1, max_length=limits.MAX_HANDLER_REF_LENGTH, pattern=r"^[^\s\x00-\x1f\x7f]+$"),
]
Delay = Annotated[float, Meta(ge=0, le=366 * 86400)]
Reason = Annotated[str, Meta(max_length=1000)]


class SubmitRequest(msgspec.Struct, kw_only=True):
    """A task to submit. Fields the API does not know are kept in the stored envelope (a newer
    producer's data survives an older node). ``id`` defaults to a random one; resubmitting an
    id to the same queue is a no-op (200), to another queue a conflict (409)."""

    handler_ref: HandlerRef
    queue: QueueName = "default"
    id: TaskId | None = None
    payload: Any = None
    headers: dict[str, str] = {}
    delay: Delay | None = None
    """Seconds until the task is first due (default: now)."""
    retry: RetryOverride | None = None


class AttemptDoc(msgspec.Struct, kw_only=True):
    number: int
    outcome: Outcome
    error_type: str | None = None
    error_message: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    worker_id: str | None = None


class TaskDoc(msgspec.Struct, kw_only=True):
    """A task envelope (fields unknown to this release appear beside these)."""

    id: str
    queue: str
    handler_ref: str
    payload: Any = None
    headers: dict[str, str] = {}
    status: Status
    attempt_count: int
    redrive_count: int
    attempts: list[AttemptDoc] = []
    created_at: datetime | None = None
    next_attempt_at: datetime | None = None
    lease_expires_at: datetime | None = None
    completed_at: datetime | None = None
    dead_lettered_at: datetime | None = None
    retry: RetryOverride | None = None
    format_version: int


class StatsDoc(msgspec.Struct, kw_only=True):
    queue: str
    pending: int
    in_flight: int
    dlq_depth: int
    succeeded: int
    oldest_pending_age: float | None
    """Seconds the longest-waiting due task has been due (null when none is due)."""
    as_of: datetime


class QueueList(msgspec.Struct, kw_only=True):
    """The queues this node knows: configured ones and those it has seen tasks for."""

    queues: list[StatsDoc]


class DLQPage(msgspec.Struct, kw_only=True):
    tasks: list[TaskDoc]
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; null on the last page."""


class FilterRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    error_type: Annotated[str, Meta(min_length=1, max_length=1024)] | None = None
    handler_ref: (
        Annotated[str, Meta(min_length=1, max_length=limits.MAX_HANDLER_REF_LENGTH)] | None
    ) = None
    dead_lettered_after: datetime | None = None
    dead_lettered_before: datetime | None = None


class ActionRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Select DLQ tasks by ``ids`` or by ``filter`` (exactly one of them). ``dry_run`` only
    counts what would be acted on."""

    ids: Annotated[list[TaskId], Meta(max_length=limits.MAX_SELECTOR_IDS)] | None = None
    filter: FilterRequest | None = None
    dry_run: bool = False
    reason: Reason | None = None


class ActionResult(msgspec.Struct, kw_only=True):
    action: str
    queue: str
    count: int
    dry_run: bool
