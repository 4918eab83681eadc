"""The request and response bodies of the HTTP API (they also generate its OpenAPI document)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from rdq.spi import MAX_PRIORITY, MIN_PRIORITY, Outcome, Status, limits

__all__ = [
    "TASK_ID_PATTERN",
    "ActionRequest",
    "ActionResult",
    "AttemptDoc",
    "AuditDoc",
    "AuditPage",
    "BreakerDoc",
    "BreakerList",
    "BreakerRequest",
    "CancelRequest",
    "ControlDoc",
    "ControlList",
    "DLQPage",
    "FilterRequest",
    "GroupDoc",
    "GroupList",
    "MinuteDoc",
    "OperationDoc",
    "OutageDoc",
    "PauseDoc",
    "PauseRequest",
    "PendingFilterRequest",
    "QueueList",
    "RateList",
    "ReasonRequest",
    "RedriveList",
    "RedriveRequest",
    "RetryNowRequest",
    "RetryRequest",
    "StatsDoc",
    "SubmitRequest",
    "TaskDoc",
    "TaskFilterRequest",
    "TaskPage",
    "WorkerDoc",
    "WorkerList",
]

TASK_ID_PATTERN = r"^[A-Za-z0-9._\-:@+=~]+$"
TaskId = Annotated[
    str, Meta(min_length=1, max_length=limits.MAX_ID_LENGTH, pattern=TASK_ID_PATTERN)
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
Seconds = Annotated[float, Meta(ge=0, le=366 * 86400)]
Reason = Annotated[str, Meta(max_length=limits.MAX_AUDIT_REASON_LENGTH)]
ErrorType = Annotated[str, Meta(min_length=1, max_length=limits.MAX_ERROR_TYPE_LENGTH)]
FilterHandlerRef = Annotated[str, Meta(min_length=1, max_length=limits.MAX_HANDLER_REF_LENGTH)]


class RetryRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A per-task override of the queue's retry settings (durations in seconds); unset fields
    keep the queue's values. ``cap`` must not be below ``base``."""

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


class TaskPage(msgspec.Struct, kw_only=True):
    tasks: list[TaskDoc]
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; null on the last page."""


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

    ids: Annotated[list[TaskId], Meta(max_length=limits.MAX_SELECTOR_IDS)] | None = None
    filter: FilterRequest | None = None
    dry_run: bool = False
    reason: Reason | None = None


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

    ids: Annotated[list[TaskId], Meta(max_length=limits.MAX_SELECTOR_IDS)] | None = None
    filter: TaskFilterRequest | None = None
    dry_run: bool = False
    reason: Reason | None = None


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


class ActionResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    action: str
    queue: str
    count: int
    dry_run: bool
    operation: OperationDoc | None = None
    """A redrive with a ``rate``: the paced redrive it started (``count`` is its total);
    absent otherwise."""


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


# --- flow control and the fleet -----------------------------------------------------------

Name = Annotated[
    str,
    Meta(min_length=1, max_length=limits.MAX_HANDLER_REF_LENGTH, pattern=r"^[^\s\x00-\x1f\x7f]+$"),
]
ControlKey = Annotated[
    str,
    Meta(min_length=1, max_length=limits.MAX_CONTROL_KEY_LENGTH, pattern=r"^[^\s\x00-\x1f\x7f]+$"),
]
Rate = Annotated[float, Meta(gt=0, le=100_000)] | Annotated[str, Meta(min_length=1, max_length=32)]


class PauseRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What to pause or resume: a ``handler`` (its ``handler_ref``), a ``dependency`` (its
    name), or, with neither, the whole queue."""

    handler: Name | None = None
    dependency: Name | None = None
    reason: Reason | None = None


class ReasonRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    reason: Reason | None = None


class BreakerRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The breaker to open or close by its ``key`` (as ``GET /v1/breakers`` lists it), or by
    its ``handler`` or ``dependency`` — exactly one of the three."""

    key: ControlKey | None = None
    handler: Name | None = None
    dependency: Name | None = None
    reason: Reason | None = None


class PendingFilterRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """PENDING tasks (the only ones a retry now makes due)."""

    error_type: ErrorType | None = None
    handler_ref: FilterHandlerRef | None = None
    after: datetime | None = None
    """Due at or after this."""
    before: datetime | None = None


class RetryNowRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Select PENDING tasks by ``ids`` or by ``filter`` (exactly one of them); those waiting
    out a backoff become due now. ``dry_run`` only counts them."""

    ids: Annotated[list[TaskId], Meta(max_length=limits.MAX_SELECTOR_IDS)] | None = None
    filter: PendingFilterRequest | None = None
    dry_run: bool = False
    reason: Reason | None = None


class RedriveRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Select DLQ tasks by ``ids`` or by ``filter`` (exactly one of them). ``dry_run`` only
    counts. ``rate`` (tasks per second, or text such as ``"50/s"``, ``"600/min"``) starts a
    paced redrive that the node drives instead of returning them all at once."""

    ids: Annotated[list[TaskId], Meta(max_length=limits.MAX_SELECTOR_IDS)] | None = None
    filter: FilterRequest | None = None
    dry_run: bool = False
    reason: Reason | None = None
    rate: Rate | None = None


class OutageDoc(msgspec.Struct, kw_only=True):
    start: datetime
    end: datetime | None = None
    """Null while it lasts."""
    error_types: list[str] = []


class BreakerDoc(msgspec.Struct, kw_only=True):
    """A breaker: ``open`` holds its key's tasks (until ``until``, or until closed by hand
    when ``by`` names who opened it), ``half_open`` lets ``probes_left`` more claims through
    fleet-wide, ``closed`` lets them go (at ``rate`` per second while it ramps up)."""

    queue: str
    key: str
    state: Literal["closed", "open", "half_open"]
    since: datetime | None = None
    until: datetime | None = None
    error_type: str | None = None
    error_message: str | None = None
    sample_task: str | None = None
    by: str | None = None
    reason: str | None = None
    trips: int = 0
    probes_left: int | None = None
    rate: int | None = None
    held: int | None = None
    """PENDING tasks of the key, when cheap to count (the queue's, a handler's on a store
    that filters itself); null otherwise."""
    held_more: bool = False
    """``held`` is a lower bound."""
    outages: list[OutageDoc] = []


class BreakerList(msgspec.Struct, kw_only=True):
    breakers: list[BreakerDoc]
    """Open ones first, then half-open, then closed."""
    unsupported: str | None = None
    """Set when the store keeps no control records: what it lacks (the list is empty)."""


class PauseDoc(msgspec.Struct, kw_only=True):
    by: str | None = None
    reason: str | None = None
    at: str | None = None


class DeclaredLimitDoc(msgspec.Struct, kw_only=True):
    """What the engine declared for a control's key (see ``LimitDoc``), by whom."""

    name: str
    per_value: bool = False
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    burst: int | None = None
    adaptive: bool = False
    sources: list[str] = []
    declared_at: datetime | None = None
    by: str = ""


class LoweredDoc(msgspec.Struct, kw_only=True):
    """A rate lowered after a handler raised ``rdq.RetryAfter``, until ``until``."""

    rate: int
    per: float = 1.0
    since: datetime
    until: datetime
    halvings: int = 1
    error: str | None = None


class ControlDoc(msgspec.Struct, kw_only=True):
    """A control record of a queue: its pause, its breaker, its limits."""

    queue: str
    key: str
    """``*`` (the whole queue), ``handler:<ref>``, ``dep:<name>``, ``limit:<name>`` or
    ``limit:<name>:<value>`` (a declared limit's), or another task key."""
    kind: Literal["queue", "handler", "dependency", "limit", "key"]
    paused: bool
    pause: PauseDoc | None = None
    gate: int | None = None
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    burst: int | None = None
    in_use: int | None = None
    """Tasks of the key that hold a live lease now."""
    limit: DeclaredLimitDoc | None = None
    """The limits the engine declared for the key (``concurrency`` and ``rate`` above are
    what the store enforces: the declared ones, a rate lowered or ramping)."""
    lowered: LoweredDoc | None = None
    breaker: BreakerDoc | None = None
    version: int
    updated_at: datetime | None = None


class LimitValueDoc(msgspec.Struct, kw_only=True):
    """One value of a per-value limit."""

    key: str
    value: str
    in_use: int = 0
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    lowered_until: datetime | None = None


class LimitDoc(msgspec.Struct, kw_only=True):
    """A declared limit of a queue, held by the store's claims across the fleet: at most
    ``concurrency`` tasks of its key (of each value) hold a claim at once, at most ``rate``
    claims per ``per`` seconds (``burst`` at once). ``in_use``: tasks with the key holding a
    live lease now; ``saturated``: keys at their concurrency limit; ``waiting``: due PENDING
    tasks with the key (of the first 1,000 due; ``waiting_more``: at least); ``current_rate``:
    the rate enforced now (lowered after a ``RetryAfter`` until ``lowered_until``, or ramping
    after an outage)."""

    queue: str
    name: str
    key: str
    kind: Literal["queue", "handler", "key", "value"]
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    burst: int | None = None
    adaptive: bool = False
    in_use: int = 0
    keys: int = 1
    saturated: int = 0
    lowered: int = 0
    current_rate: int | None = None
    current_per: float = 1.0
    lowered_until: datetime | None = None
    waiting: int | None = None
    waiting_more: bool = False
    values: list[LimitValueDoc] = []
    """A per-value limit's busiest values (at most 20)."""
    declared_by: str = ""
    declared_at: datetime | None = None


class LimitList(msgspec.Struct, kw_only=True):
    limits: list[LimitDoc]
    """By queue, then name."""
    unsupported: str | None = None
    """Set when the store keeps no control records: what it lacks (the list is empty)."""


class ControlList(msgspec.Struct, kw_only=True):
    queue: str
    controls: list[ControlDoc]
    unsupported: str | None = None
    """Set when the store keeps no control records: what it lacks."""


class RedriveList(msgspec.Struct, kw_only=True):
    redrives: list[OperationDoc]
    """Newest first, running and finished."""
    unsupported: str | None = None


class WorkerDoc(msgspec.Struct, kw_only=True):
    """A registered worker, or a node's own registration (``kind`` ``node``), judged by the
    store's clock: ``live`` when seen within two of its heartbeats, else ``silent``."""

    id: str
    kind: Literal["worker", "node"]
    host: str
    pid: int
    version: str
    queues: list[str]
    concurrency: int
    held: int
    """Tasks it held at its last heartbeat."""
    state: str
    """``running``, or ``stopping`` once it stopped claiming."""
    heartbeat: float
    started_at: datetime | None = None
    seen_at: datetime | None = None
    status: Literal["live", "silent"]
    silent_for: float
    """Seconds since its last heartbeat."""


class WorkerList(msgspec.Struct, kw_only=True):
    workers: list[WorkerDoc]
    """Live ones first."""
    as_of: datetime | None = None
    """The store's now, that ``status`` and ``silent_for`` are judged by."""
    unsupported: str | None = None


class MinuteDoc(msgspec.Struct, kw_only=True):
    minute: datetime
    succeeded: int
    failed: int
    """Attempts that failed and will be retried."""
    dead: int
    deferred: int
    """Attempts held back by a breaker or a pause (no attempt used up)."""


class RateList(msgspec.Struct, kw_only=True):
    queue: str
    minutes: list[MinuteDoc]
    """One per minute, oldest first, ending with the current one."""
    as_of: datetime | None = None
    unsupported: str | None = None
