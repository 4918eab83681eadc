"""The HTTP API's bodies for tasks, queues, the DLQ, bulk actions and the audit trail (the
operations every store has); flow control and the fleet are in :mod:`rdq.server._flow_models`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from rdq.server._fields import (
    DedupKey,
    Delay,
    ErrorType,
    FilterHandlerRef,
    HandlerRef,
    QueueName,
    Reason,
    Seconds,
    TaskId,
)
from rdq.spi import MAX_PRIORITY, MIN_PRIORITY, Outcome, Status, bounds

__all__ = [
    "ActionRequest",
    "ActionResult",
    "AttemptDoc",
    "AttemptsDoc",
    "AuditDoc",
    "AuditPage",
    "CancelRequest",
    "DLQPage",
    "FilterRequest",
    "GroupDoc",
    "GroupList",
    "HoldDoc",
    "HolderDoc",
    "OperationDoc",
    "OutlookDoc",
    "QueueList",
    "RetryDoc",
    "RetryRequest",
    "SkippedDoc",
    "StatsDoc",
    "SubmitRequest",
    "TaskDoc",
    "TaskFilterRequest",
    "TaskPage",
]


class RetryRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A per-task override of the queue's retry settings (durations in seconds); unset fields
    keep the queue's values. A ``cap`` below ``base`` is taken as ``base`` (the engine never
    waits less than ``base`` for a cap's sake)."""

    max_attempts: Annotated[int, Meta(ge=1, le=1000)] | None = None
    backoff: Literal["exponential", "fixed", "linear"] | None = None
    base: Seconds | None = None
    cap: Seconds | None = None
    timeout: Annotated[float, Meta(gt=0, le=366 * 86400)] | None = None


class SubmitRequest(msgspec.Struct, kw_only=True):
    """A task to submit. Fields the API does not know are kept in the stored envelope (a newer
    producer's data survives an older node); they count towards the payload's size limit.
    ``id`` defaults to a random one; resubmitting an id to the same queue is a no-op (200), to
    another queue a conflict (409)."""

    handler_ref: HandlerRef
    queue: QueueName = "default"
    id: TaskId | None = None
    payload: Any = None
    headers: dict[str, str] = {}
    delay: Delay | None = None
    """Seconds until the task is first due (default: now)."""
    priority: Annotated[int, Meta(ge=MIN_PRIORITY, le=MAX_PRIORITY)] = 0
    """Higher is claimed first among due tasks of the queue."""
    retry: RetryRequest | None = None
    force: bool = False
    """On a node with an application (``--app``): submit a handler or queue the application
    does not know (one another application serves); without it such a task is refused with
    the closest known name. Not stored."""
    dedup_key: DedupKey | None = None
    """Fold the submission into the live task that holds this key (keys are unique across
    queues, as ids are): see ``dedup_mode``. The ``RDQ-Outcome`` header of the answer says
    what happened. Not stored in the envelope."""
    dedup_window: Seconds | None = None
    """Seconds the key stays held after its task's submission (default, and 0: while the task is
    pending or running)."""
    dedup_mode: Literal["skip", "replace", "extend", "debounce"] = "skip"
    """What a submission of a held key does: nothing (``skip``), start its window again
    (``extend``), put its payload and headers into the holder if it has not started
    (``replace``), and also make the holder due after this ``delay`` (``debounce``)."""
    dedup_max_age: Seconds | None = None
    """``debounce``: the holder is never due later than this many seconds after it was first
    submitted (default 3600)."""


class AttemptDoc(msgspec.Struct, kw_only=True):
    number: int
    outcome: Outcome
    error_type: str | None = None
    error_message: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    worker_id: str | None = None
    traceback: str | None = None


class RetryDoc(msgspec.Struct, kw_only=True):
    max_attempts: int | None = None
    backoff: str | None = None
    base: float | None = None
    cap: float | None = None
    timeout: float | None = None


class TaskDoc(msgspec.Struct, kw_only=True):
    """A task envelope (fields unknown to this release appear beside these). ``corrupt`` is
    set when the stored task does not decode: it says what is wrong."""

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
    retry: RetryDoc | None = None
    priority: int = 0
    claimed_by: str | None = None
    claimed_at: datetime | None = None
    cancelled_at: datetime | None = None
    corrupt: str | None = None
    format_version: int
    payload_state: Literal["decrypted", "encrypted", "hidden"] | None = None
    """Absent when the payload is shown as stored, in clear. ``decrypted``: sealed in the
    store, opened for this reader; ``encrypted``: sealed, and this reader's role may not read
    payloads or the node lacks its key (``payload`` is null); ``hidden``: in clear, and
    this reader's role may not read payloads (``payload`` is null)."""


class StatsDoc(msgspec.Struct, kw_only=True):
    queue: str
    pending: int
    in_flight: int
    dlq_depth: int
    succeeded: int
    cancelled: int = 0
    oldest_pending_age: float | None
    """Seconds the longest-waiting due task has been due (null when none is due)."""
    as_of: datetime
    estimated: list[str] = []
    """Names of the counts above that are estimates (large queues); the others are exact."""


class QueueList(msgspec.Struct, kw_only=True):
    """Every queue the store holds tasks for, and the queues this node works."""

    queues: list[StatsDoc]


class DLQPage(msgspec.Struct, kw_only=True):
    tasks: list[TaskDoc]
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; null on the last page."""


class HoldDoc(msgspec.Struct, kw_only=True):
    """What holds a PENDING task back: a ``pause``, a ``breaker`` (open or half-open; ``since``
    is its outage's start, ``until`` its next probe) or a full ``limit``."""

    kind: Literal["pause", "breaker", "limit"]
    key: str
    state: str | None = None
    by: str | None = None
    reason: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    detail: str | None = None


class HolderDoc(msgspec.Struct, kw_only=True):
    """Who holds an IN_FLIGHT task: its worker, ``live`` or ``silent`` (null: not
    registered), and its lease (``lease_in`` seconds, by the store's clock; negative: it
    lapsed and the task waits to be reclaimed)."""

    worker: str | None
    status: str | None = None
    silent_for: float | None = None
    lease_in: float | None = None


class AttemptsDoc(msgspec.Struct, kw_only=True):
    """A task's attempts since its last redrive: ``recorded`` (``attempt_count``), of which
    ``charged`` used up one of ``max_attempts`` (DEFERRED and INTERRUPTED attempts and
    failures during an outage of its dependency do not), and ``left`` when ``max_attempts``
    is known (the task's override, the node's application, or its queue's live workers)."""

    recorded: int
    charged: int
    uncharged: int
    max: int | None = None
    left: int | None = None


class OutlookDoc(msgspec.Struct, kw_only=True):
    """What holds a task and what happens next, judged by the store's clock."""

    id: str
    queue: str
    status: str
    next: str
    """One sentence: what happens next."""
    holds: list[HoldDoc] = []
    holder: HolderDoc | None = None
    served: bool | None = None
    """A live worker serves the task's queue (null: the store keeps no worker registry)."""
    attempts: AttemptsDoc


class TaskPage(msgspec.Struct, kw_only=True):
    tasks: list[TaskDoc]
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; null on the last page."""
    outlook: list[OutlookDoc] | None = None
    """With ``outlook=true``: what holds each task and what happens next, in the order of
    ``tasks``."""


class GroupDoc(msgspec.Struct, kw_only=True):
    """The DEAD tasks of a queue that share a handler and a last error type."""

    handler_ref: str
    error_type: str | None
    count: int
    first_dead_lettered_at: datetime
    last_dead_lettered_at: datetime


class GroupList(msgspec.Struct, kw_only=True):
    queue: str
    groups: list[GroupDoc]
    """Largest group first."""


class FilterRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    error_type: ErrorType | None = None
    handler_ref: FilterHandlerRef | None = None
    dead_lettered_after: datetime | None = None
    dead_lettered_before: datetime | None = None


class ActionRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Select DLQ tasks by ``ids`` or by ``filter`` (exactly one of them: both or neither is a
    422). ``dry_run`` only counts what would be acted on."""

    ids: Annotated[list[TaskId], Meta(max_length=bounds.MAX_SELECTOR_IDS)] | None = None
    filter: FilterRequest | None = None
    dry_run: bool = False
    reason: Reason | None = None
    force: bool = False
    """Act on a queue nothing on the store knows (see ``unknown_name``)."""


class TaskFilterRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    status: Literal["PENDING", "IN_FLIGHT"] = "PENDING"
    error_type: ErrorType | None = None
    handler_ref: FilterHandlerRef | None = None
    after: datetime | None = None
    """Status time (PENDING: due at; IN_FLIGHT: lease expiry) at or after this."""
    before: datetime | None = None


class CancelRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Select PENDING or IN_FLIGHT tasks by ``ids`` or by ``filter`` (exactly one of them).
    ``dry_run`` only counts what would be cancelled."""

    ids: Annotated[list[TaskId], Meta(max_length=bounds.MAX_SELECTOR_IDS)] | None = None
    filter: TaskFilterRequest | None = None
    dry_run: bool = False
    reason: Reason | None = None
    force: bool = False
    """Act on a queue nothing on the store knows (see ``unknown_name``)."""


class OperationDoc(msgspec.Struct, kw_only=True):
    """A paced redrive: it returns the DEAD tasks it selected at most ``rate`` per second,
    driven by one node (or ``rdq dlq redrive --rate`` in the foreground) at a time; another
    takes it over when its driver stops renewing ``driver_until``."""

    id: str
    queue: str
    rate: float
    """Tasks per second at most."""
    total: int
    """How many it selected when it began: it never returns more."""
    done: int
    """How many it returned so far."""
    status: Literal["running", "done", "cancelled", "failed"]
    filter: dict[str, Any] | None = None
    ids: list[str] | None = None
    actor: str
    reason: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    driver: str | None = None
    driver_until: datetime | None = None
    error: str | None = None
    cancelled_by: str | None = None


class SkippedDoc(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A named task the action did not act on, and why."""

    id: str
    reason: Literal["not_found", "other_queue", "status", "due"]
    """``not_found``; ``other_queue`` (it is in ``queue``); ``status`` (it is ``status``, the
    action takes ``wanted``); ``due`` (a retry now of a task due already)."""
    queue: str | None = None
    status: str | None = None
    wanted: str | None = None


class ActionResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What an action did (or, with ``dry_run``, would do): ``count`` tasks; the named ids it
    did not act on, each with why (``skipped``); and, when a filter matched nothing, what
    the queue holds that is close to it (``hint``). A ``count`` of 0 is the truth: nothing
    was done. An action that ran also says how many tasks the selection ``matched`` when it
    began and how many were already ``gone`` when it reached them (redriven, purged,
    cancelled or removed by retention meanwhile): ``matched = count + gone``; a purge on a
    node with an archive, how many it ``archived`` first and where (``archive``)."""

    action: str
    queue: str
    count: int
    dry_run: bool
    matched: int | None = None
    gone: int | None = None
    archived: int | None = None
    archive: str | None = None
    operation: OperationDoc | None = None
    """A redrive with a ``rate``: the paced redrive it started (``count`` is its total);
    absent otherwise."""
    skipped: list[SkippedDoc] = []
    hint: str | None = None


class AuditDoc(msgspec.Struct, kw_only=True):
    """One operator action as recorded in the store's audit trail."""

    id: str | None
    time: datetime | None
    actor: str
    action: str
    queue: str
    selector: dict[str, Any]
    count: int
    reason: str | None
    error: str | None


class AuditPage(msgspec.Struct, kw_only=True):
    entries: list[AuditDoc]
    """Newest first."""
    next_cursor: str | None


class ImportRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """DEAD tasks to put back into the queue's DLQ, as ``GET /v1/tasks/{id}`` or an export
    line writes them (attempts and times included), and why."""

    tasks: Annotated[list[dict[str, Any]], Meta(min_length=1, max_length=bounds.MAX_LIMIT)]
    reason: Reason | None = None


class ImportSkippedDoc(msgspec.Struct, kw_only=True):
    id: str
    why: str


class ImportResult(msgspec.Struct, kw_only=True):
    """What an import did: tasks put back (``imported``), already in the store (``existing``:
    an import is idempotent by id), and tasks not put back, each with why (not DEAD, of
    another queue, invalid, or an id another queue holds)."""

    queue: str
    imported: int
    existing: int
    skipped: list[ImportSkippedDoc] = []


class RetentionDoc(msgspec.Struct, kw_only=True):
    """How long the queue's finished tasks stay, and what retention did: its counts by status
    since the record began (``archived``: written to the archive; ``expired``: removed after
    it), its last round, and the worker that runs it now. ``dead_ttl``, ``task_ttl``,
    ``archive_succeeded`` and ``keep_succeeded`` are the node's application's settings for the
    queue (null when the node has none: the workers' own settings decide; ``keep_succeeded``
    false: a succeeded task is deleted as it completes, retention never sees it). Counts need a
    store with ``control`` (``recorded`` false otherwise: the workers' metrics have them)."""

    queue: str
    dead_ttl: float | None = None
    task_ttl: float | None = None
    archive_succeeded: bool | None = None
    keep_succeeded: bool | None = None
    recorded: bool = False
    archived: dict[str, int] = {}
    expired: dict[str, int] = {}
    last_run: datetime | None = None
    last_archived: int = 0
    last_expired: int = 0
    archive: str | None = None
    """Where the last round's archive went."""
    error: str | None = None
    runner: str | None = None
