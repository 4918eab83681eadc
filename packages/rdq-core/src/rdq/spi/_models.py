"""The msgspec models of the storage contract: the envelope and everything the SPI passes around."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

import msgspec

from rdq.errors import ValidationError

__all__ = [
    "DEFAULT_PRIORITY",
    "FORMAT_VERSION",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "PAYLOAD_REF_HEADER",
    "STATUS_TIME_FIELDS",
    "AdmitOutcome",
    "Admitted",
    "Attempt",
    "AuditEntry",
    "AuditFilter",
    "Capabilities",
    "Claimed",
    "Completion",
    "DLQFilter",
    "DLQGroup",
    "Dedup",
    "DedupMode",
    "Envelope",
    "Outcome",
    "Page",
    "RetryOverride",
    "Selector",
    "Stats",
    "Status",
    "TaskFilter",
    "status_time",
]

FORMAT_VERSION = 1
"""The envelope format this release writes. Readers keep fields they do not know."""

PAYLOAD_REF_HEADER = "rdq-payload-ref"
"""The header of a task whose payload lives in a blob store (``sha256:<hex digest>``; its
``payload`` is then ``null``): stores index it (capability ``payload_refs``)."""

MIN_PRIORITY = -10
MAX_PRIORITY = 10
DEFAULT_PRIORITY = 0
"""Task priorities run from ``MIN_PRIORITY`` to ``MAX_PRIORITY``; higher is claimed first."""


class Status(enum.StrEnum):
    """Where a task is in its life."""

    PENDING = "PENDING"
    IN_FLIGHT = "IN_FLIGHT"
    SUCCEEDED = "SUCCEEDED"
    DEAD = "DEAD"
    CANCELLED = "CANCELLED"
    """Cancelled by an operator before it succeeded: never runs again; terminal, listable and
    purgeable like a DEAD task, but not in the DLQ and not redrivable."""


class Outcome(enum.StrEnum):
    """How one attempt ended."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    PERMANENT = "PERMANENT"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    INTERRUPTED = "INTERRUPTED"
    DEFERRED = "DEFERRED"
    """(contract version 3) The task's dependency was down (its circuit breaker open or
    probing): the engine rescheduled it without using up one of its attempts."""
    SNOOZED = "SNOOZED"
    """(contract version 4) The handler said "not yet" (``rdq.Snooze``): the engine
    rescheduled it for the delay it asked, without using up one of its attempts."""


class Attempt(msgspec.Struct, kw_only=True, frozen=True):
    """The record of one attempt. Storage appends it unchanged; only the engine writes its
    contents, except ``LEASE_EXPIRED`` records, which the storage writes itself when it
    reclaims a lapsed lease:

    - ``number`` = the task's ``attempt_count`` before the reclaim, plus one;
    - ``outcome`` = ``LEASE_EXPIRED``, ``error_type`` = ``"LeaseExpired"``, ``error_message``
      a sentence naming when the lease expired;
    - ``started_at`` = when the lapsed claim was made (``claimed_at``), ``finished_at`` = the
      reclaim's storage time (the same instant as the new claim's ``claimed_at``: one
      reading of the clock per claim), ``worker_id`` = the worker that held the lapsed lease
      (``claimed_by``, ``None`` if it gave none); ``traceback`` is ``None``.

    ``traceback`` is the formatted traceback of a failure (bounded by
    :data:`rdq.spi.limits.MAX_TRACEBACK_LENGTH`; the engine keeps the innermost frames when it
    cuts one)."""

    number: int
    outcome: Outcome
    error_type: str | None = None
    error_message: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    worker_id: str | None = None
    traceback: str | None = None


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

    Fields the store owns (``enqueue`` ignores what the caller put there): ``status``,
    ``created_at``, ``lease_expires_at``, ``claimed_by``, ``claimed_at``, ``completed_at``,
    ``dead_lettered_at``, ``cancelled_at`` and ``corrupt``.

    - ``priority`` (``MIN_PRIORITY``..``MAX_PRIORITY``, default 0): among due tasks of a
      queue, higher priorities are claimed first; within one priority, oldest due first.
    - ``claimed_by`` / ``claimed_at``: the worker id given to ``claim_due`` and the storage
      time of the claim, while the task is IN_FLIGHT (``None`` otherwise).
    - ``cancelled_at``: when an operator cancelled the task (status CANCELLED).
    - ``keys`` (contract version 3): the task's flow-control keys beyond its queue and handler
      (its dependency, the keys of its queue's limits: ``"dep:psp"``, ``"tenant:acme"``),
      chosen by the engine at submit time and stored as given. A claim honours the controls
      of every key of the task (see :class:`~rdq.spi.Control`).
    - ``corrupt``: set only on a task *read back* from a store whose stored form does not
      decode (written by hand or by a buggy producer). It says what is wrong and shows the
      raw stored value; the fields that did decode are filled in (``id``, ``queue`` and
      ``status`` always), the others hold their defaults. Such a task never makes a store
      operation raise; the engine dead-letters it as ``rdq.CorruptTask`` when it is claimed.
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
    priority: int = DEFAULT_PRIORITY
    keys: list[str] = []
    claimed_by: str | None = None
    claimed_at: datetime | None = None
    cancelled_at: datetime | None = None
    corrupt: str | None = None
    format_version: int = FORMAT_VERSION
    extra: dict[str, Any] = {}


class Claimed(msgspec.Struct, frozen=True):
    """A task handed out by ``claim_due`` with the fencing token that proves the lease.

    ``task.lease_expires_at`` is the lease's end by the storage clock; the claim was made at
    ``task.lease_expires_at - lease``, which is how the engine learns the storage's time."""

    task: Envelope
    token: str


class Capabilities(msgspec.Struct, kw_only=True, frozen=True):
    """What a store offers beyond the operations every store has, and the contract version it
    implements (see ``docs/backend-changelog.md``).

    Every flag defaults to ``False``, so a store written for an earlier contract advertises
    nothing it does not know of. The engine checks a flag before it uses what the flag
    offers: an *acceleration* missing only costs time (the engine does the work another way);
    a *feature* missing makes what needs it fail with :class:`~rdq.errors.Unsupported`,
    naming the store and the flag, and nothing else. The kit runs each flag's clauses only
    when the store advertises it, and reports the others as "not implemented" skips.
    """

    contract_version: int = 1
    """The contract version the store implements (:data:`rdq.spi.CONTRACT_VERSION` is this
    release's). A store that states none implements version 1, the first published
    contract. Behaviour promised since a later version (no flag of its own) is checked by the
    kit only for stores of that version or newer."""

    # --- accelerations (contract version 1) ---------------------------------------------------
    notify: bool = False
    """``wait_due(queue, timeout)`` blocks until a task may be due (else workers poll)."""
    filter_pushdown: bool = False
    """DLQ filters are evaluated by the backend (listing, redrive and purge by filter)."""
    batch_enqueue: bool = False
    """``enqueue_batch(tasks)`` admits many tasks in one round trip."""
    batch_complete: bool = False
    """``complete_many(completions)`` resolves many claims in one round trip, fenced per task."""

    # --- contract version 2 -------------------------------------------------------------------
    group_pushdown: bool = False
    """(acceleration) ``dlq_groups(queue)`` is computed by the backend (otherwise
    ``StorageBase`` pages through the DLQ)."""
    priorities: bool = False
    """Claims take higher ``priority`` first (without it: oldest due first; the engine refuses
    a submit with a priority other than 0)."""
    claim_holder: bool = False
    """``claim_due`` takes ``worker_id`` and keeps it in ``claimed_by``/``claimed_at`` and in
    ``LEASE_EXPIRED`` records."""
    cancel: bool = False
    """``cancel(queue, ids)``; ``purge`` by ids deletes CANCELLED tasks too; ``stats`` counts
    them."""
    task_listing: bool = False
    """``list_tasks(queue, filter, page)`` lists the tasks of any status."""
    queue_listing: bool = False
    """``list_queues()`` lists every queue that holds a task (without it: the queues an
    application names)."""
    import_tasks: bool = False
    """``import_tasks(tasks)`` stores tasks exactly as given (``rdq copy``)."""
    audit: bool = False
    """``append_audit`` / ``list_audit``: the store keeps the audit trail (without it, audit
    records are only logged)."""

    # --- contract version 3 -------------------------------------------------------------------
    control: bool = False
    """Control records (``list_controls``, ``put_control``, ``delete_control``) that
    ``claim_due`` honours: pauses, breakers' gates, concurrency and rate limits; and
    ``retry_now``. Tasks keep their ``keys``."""
    worker_registry: bool = False
    """``heartbeat_worker``, ``list_workers``, ``remove_worker``, ``purge_workers``."""
    counters: bool = False
    """``add_counts``, ``read_counts``, ``purge_counts``: attempts ended per queue and minute."""

    # --- contract version 4 -------------------------------------------------------------------
    fair_shares: bool = False
    """Claims share a queue among the groups of its due tasks when its ``*`` control names a
    ``fair`` key prefix (see :class:`~rdq.spi.ClaimOrder`)."""
    priority_aging: bool = False
    """Claims order a queue by aged due time when its ``*`` control sets ``aging``."""
    overlapping_completions: bool = False
    """(acceleration, with ``batch_complete``) A second ``complete_many`` call in flight
    costs the store little beside the first (a single-threaded server that takes pipelined
    calls in turn, as Redis does): a worker keeps two in flight, so its next batch is written
    while the first is. Without it one, because where each call is a transaction of its own
    (PostgreSQL) two smaller ones cost more than they save."""

    # --- contract version 5 -------------------------------------------------------------------
    retention: bool = False
    """``expire_tasks(queue, ids, before)`` deletes exactly the listed finished tasks whose
    status time is before ``before``, each atomically (the engine archives them first).
    Without it ``StorageBase`` builds it on ``get``, ``purge`` and ``purge_succeeded``, which
    can delete a task redriven and dead-lettered again between two of those calls, and
    finished tasks older than the listed ones that were never listed."""
    dedup: bool = False
    """``admit(task, dedup)``: a task submitted with a dedup key is admitted only while no
    other live task holds the key (see :class:`Dedup`), atomically: of concurrent admissions
    of one key exactly one adds a task. Without it the engine refuses every mode but ``skip``,
    which it serves by a task id derived from the key (see ``docs/engine.md``)."""
    payload_refs: bool = False
    """``held_payload_refs(refs)``: which payload references (the ``rdq-payload-ref`` header)
    some stored task carries, from an index. Without it the engine keeps payloads inline
    (those above the inline limit are refused, as before): a blob it could not prove unused
    could never be deleted."""
    discard_succeeded: bool = False
    """``complete(..., discard=True)`` and ``Completion(discard=True)`` delete the task, with
    what belongs to it (its dedup key, its payload reference), in the same atomic step that
    checks the token, instead of keeping it SUCCEEDED. Without it a worker refuses to serve a
    queue configured ``keep_succeeded = False``."""

    # --- announced optional operations ----------------------------------------------------------
    reopen: bool = False
    """``reopen()`` builds a second store on the same data, with connections of its own (the
    worker's lease thread uses one)."""
    transactional_enqueue: bool = False
    """``enqueue_in(connection, tasks)`` admits tasks inside an application's own
    transaction."""
    backup: bool = False
    """``backup(target)`` writes a consistent copy of the store's data to a file while the
    store keeps serving (``rdq backup``)."""


class Backup(msgspec.Struct, kw_only=True, frozen=True):
    """What ``backup(target)`` wrote, and how the copy was checked."""

    target: str
    """The file the copy was written to."""
    size: int
    """Its size in bytes."""
    tasks: dict[str, int]
    """How many tasks of each status the copy holds (statuses it holds none of are left
    out), counted in the copy itself."""
    checks: list[str]
    """What the copy was checked with and what each check answered (all passed: a copy that
    fails one is never left at ``target``)."""
    seconds: float
    """How long writing and checking the copy took."""


class DedupMode(enum.StrEnum):
    """What a submission whose dedup key is held does (see :class:`Dedup`)."""

    SKIP = "skip"
    REPLACE = "replace"
    EXTEND = "extend"
    DEBOUNCE = "debounce"


class Dedup(msgspec.Struct, kw_only=True, frozen=True):
    """How a task submitted with a dedup key is folded into the task that holds the key.

    A key is **held** by the task it was last given to: with a ``window`` (seconds), until the
    window has passed since the task was admitted (or the key last extended), whatever the
    task's status; without one, while the task is PENDING or IN_FLIGHT. A key whose task no
    longer exists (purged, expired) is free. Keys are unique across queues, as task ids are.

    When the key is free the task is admitted and takes it (``added``). When it is held:

    - ``skip``: nothing changes (``skipped``);
    - ``extend``: the window starts again from now (``extended``; needs a window);
    - ``replace``: a holder still PENDING takes the submission's payload and headers, its due
      time kept (``replaced``); a holder already claimed or finished is left alone
      (``skipped``);
    - ``debounce``: as ``replace``, and the holder becomes due at the submission's due time
      (now + its delay), never later than ``max_age`` seconds after the holder was admitted,
      so a stream of submissions cannot put a task off for ever; the window (if any) starts
      again."""

    key: str
    mode: DedupMode = DedupMode.SKIP
    window: float | None = None
    max_age: float | None = None


class AdmitOutcome(enum.StrEnum):
    """What ``admit`` did with a submission."""

    ADDED = "added"
    SKIPPED = "skipped"
    REPLACED = "replaced"
    EXTENDED = "extended"


class Admitted(msgspec.Struct, kw_only=True, frozen=True):
    """The answer of ``admit``: what it did, and the task that holds the key now (the one
    admitted, or the holder it left, replaced or extended)."""

    outcome: AdmitOutcome
    task_id: str
    queue: str


class Completion(msgspec.Struct, frozen=True):
    """One successful attempt to record with ``complete_many``: the task, its claim token and
    the attempt record; ``discard`` deletes the task instead of keeping it SUCCEEDED, as
    ``complete(..., discard=True)`` does (capability ``discard_succeeded``)."""

    task_id: str
    token: str
    attempt: Attempt
    discard: bool = False


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


class TaskFilter(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """Selects tasks of one status for ``list_tasks``. Every field that is set must match.

    Tasks are listed by their *status time* (see :func:`status_time`), then id: PENDING by
    ``next_attempt_at``, IN_FLIGHT by ``lease_expires_at``, SUCCEEDED by ``completed_at``,
    DEAD by ``dead_lettered_at``, CANCELLED by ``cancelled_at``. ``after`` (inclusive) and
    ``before`` (exclusive) bound that time; ``error_type`` matches the last attempt's error
    type, as in :class:`DLQFilter`."""

    status: Status
    error_type: str | None = None
    handler_ref: str | None = None
    after: datetime | None = None
    before: datetime | None = None

    def matches(self, task: Envelope) -> bool:
        """True if ``task`` is selected by this filter."""
        if task.status != self.status:
            return False
        if self.handler_ref is not None and task.handler_ref != self.handler_ref:
            return False
        if self.error_type is not None:
            last = task.attempts[-1] if task.attempts else None
            if last is None or last.error_type != self.error_type:
                return False
        at = status_time(task)
        if self.after is not None and (at is None or at < self.after):
            return False
        return not (self.before is not None and (at is None or at >= self.before))


STATUS_TIME_FIELDS: dict[Status, str] = {
    Status.PENDING: "next_attempt_at",
    Status.IN_FLIGHT: "lease_expires_at",
    Status.SUCCEEDED: "completed_at",
    Status.DEAD: "dead_lettered_at",
    Status.CANCELLED: "cancelled_at",
}
"""The envelope field that holds each status's *status time* (see :class:`TaskFilter`)."""


def status_time(task: Envelope) -> datetime | None:
    """The time a task is listed by in its status (see :class:`TaskFilter`)."""
    value: datetime | None = getattr(task, STATUS_TIME_FIELDS[task.status])
    return value


class DLQGroup(msgspec.Struct, kw_only=True, frozen=True):
    """The DEAD tasks of a queue that share a handler and a last error type: how many, and
    the first and last time one of them was dead-lettered."""

    handler_ref: str
    error_type: str | None
    count: int
    first_dead_lettered_at: datetime
    last_dead_lettered_at: datetime


class Page(msgspec.Struct, kw_only=True, frozen=True):
    """Which page to read (DLQ, task list or audit trail): up to ``limit`` items after the
    opaque ``cursor`` returned by the previous page (``None`` for the first page)."""

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
    included), ``dlq_depth`` DEAD ones, ``oldest_pending_age`` is how long (seconds) the
    longest-waiting *due* PENDING task has been due, or ``None`` when no PENDING task is due.

    A count above :data:`rdq.spi.limits.EXACT_COUNT_THRESHOLD` may be an estimate, so that a
    snapshot of a queue with millions of rows stays cheap; the names of the estimated count
    fields are listed in ``estimated``. Counts at or below the threshold are always exact."""

    queue: str
    pending: int
    in_flight: int
    dlq_depth: int
    succeeded: int
    oldest_pending_age: float | None
    as_of: datetime
    cancelled: int = 0
    estimated: tuple[str, ...] = ()


class AuditEntry(msgspec.Struct, kw_only=True, frozen=True):
    """One operator action (redrive, purge, cancel, …) as the engine recorded it.

    The engine decides and fills in every field but ``id`` and ``time``; ``append_audit``
    stores it unchanged, stamps ``time`` with the storage clock and gives it a unique ``id``.
    ``selector`` is the JSON form of what was selected (ids or filter); ``count`` how many
    tasks the action touched; ``error`` is set when it failed part-way."""

    actor: str
    action: str
    queue: str
    selector: dict[str, Any] = {}
    count: int = 0
    reason: str | None = None
    error: str | None = None
    id: str | None = None
    time: datetime | None = None


class AuditFilter(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """Selects audit entries; every field that is set must match. ``after`` is inclusive,
    ``before`` exclusive, both on ``time``."""

    queue: str | None = None
    action: str | None = None
    actor: str | None = None
    after: datetime | None = None
    before: datetime | None = None

    def matches(self, entry: AuditEntry) -> bool:
        if self.queue is not None and entry.queue != self.queue:
            return False
        if self.action is not None and entry.action != self.action:
            return False
        if self.actor is not None and entry.actor != self.actor:
            return False
        at = entry.time
        if self.after is not None and (at is None or at < self.after):
            return False
        return not (self.before is not None and (at is None or at >= self.before))
