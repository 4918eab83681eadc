"""The ``Storage`` protocol: the contract every rdq backend implements.

Operations marked with a capability name, as "(``cancel``)", are optional: a store offers
them when its :meth:`~Storage.capabilities` say so (see :mod:`rdq.spi._contract`).

A storage plugin stores tasks, decides due-ness by *its own clock*, leases claims with fencing
tokens and applies each mutation atomically. It never interprets a payload and never sees a
retry policy: the engine makes every decision. ``rdq_compliance.StorageSuite`` checks every
promise written here.

Every operation validates its input with :mod:`rdq.spi.limits` and raises
:class:`~rdq.errors.ValidationError` (naming the field) before touching stored state. Driver
exceptions never escape unwrapped: an unreachable backend raises
:class:`~rdq.errors.StorageUnavailable`, anything else a :class:`~rdq.errors.StorageError`.

Lifecycle (:class:`StorageBase` implements it): a store is opened by ``connect()`` (or
``async with``) and released by ``aclose()``; both are idempotent. Every other operation,
``migrate`` included, raises :class:`~rdq.errors.NotConnected` before ``connect`` and after
``aclose``; ``connect`` after ``aclose`` opens the store again.

Time limits: no operation waits on the backend forever. Each store has an operation timeout
(URL option ``timeout``, in seconds, default :data:`rdq.spi.limits.DEFAULT_OPERATION_TIMEOUT`;
``migrate`` and ``wait_due``'s own wait are exempt) after which the call raises
``StorageUnavailable`` — a frozen or partitioned database is an outage, not a hang. A
``timeout`` that is not a positive number makes ``open_storage`` raise ``ConfigError`` with
``key="timeout"`` (every bad URL option is reported under its own name).

Corrupt stored tasks: a stored task whose stored form does not decode (edited by hand, written
by a buggy producer in another language) never makes an operation raise and never blocks
other tasks. Reads (``get``, ``dlq_list``, ``list_tasks``, ``claim_due``) return it with
``Envelope.corrupt`` set (a page read without attempts need not read the attempt records, so
it may miss a problem that lies only in them; ``get`` and pages with attempts see it);
``claim_due`` claims it like any other due task (the engine then
dead-letters it); ``dead_letter``, ``purge`` and ``cancel`` work on it, and a lapsed lease on
it is reclaimed like any other. Where it can, a store keeps the raw stored value unchanged for
inspection. Each store gives its tests a way to write such a task (the compliance kit's
``corrupt_task`` fixture).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from rdq.errors import NotFound, StaleClaim
from rdq.spi._flow import Control, Counts, WorkerInfo
from rdq.spi._models import (
    Admitted,
    Attempt,
    AuditEntry,
    AuditFilter,
    Backup,
    Capabilities,
    Claimed,
    Completion,
    Dedup,
    DLQFilter,
    DLQGroup,
    Envelope,
    Page,
    Selector,
    Stats,
    TaskFilter,
)

__all__ = ["Storage"]


@runtime_checkable
class Storage(Protocol):
    """The operations of the contract, plus lifecycle and the optional extras."""

    # --- lifecycle -------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open connections. Called by ``async with``; idempotent.

        Raises ``StorageUnavailable`` (naming host and port where there is one) when the
        backend cannot be reached or refuses the credentials."""

    async def aclose(self) -> None:
        """Release every connection. Idempotent; operations then raise ``NotConnected``
        until ``connect`` is called again."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def migrate(self) -> list[str] | None:
        """Create or upgrade the schema (tables, indexes, scripts). Idempotent, and safe when
        several processes run it at once.

        Returns the names of the steps it applied, in order (``[]`` when the schema was
        already up to date), or ``None`` when the store does not say (``rdq migrate`` prints
        what it can)."""

    # --- admission -------------------------------------------------------------------------

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        """Admit ``task``; return True if it was stored, False if it already existed.

        The store sets ``status=PENDING``, ``created_at`` to its own now, clears every other
        store-owned field (``lease_expires_at``, ``claimed_by``, ``claimed_at``,
        ``completed_at``, ``dead_lettered_at``, ``cancelled_at``), and makes the task due at
        ``task.next_attempt_at`` if given, else at its own now plus ``delay`` (default: now).
        All other fields (``priority``, ``attempts``, counters, unknown ones in ``extra``) are
        stored as given and returned unchanged by ``get``. The caller's envelope is never
        modified. A task with ``corrupt`` set (read back from a store) is refused with
        ``ValidationError`` (field ``corrupt``), as is a negative ``delay`` (field
        ``delay``).

        Idempotent by id within a queue: enqueueing an id that exists in the same queue (in any
        status) changes nothing and returns False. Raises ``IDConflict`` if the id exists in
        another queue."""

    # --- claiming --------------------------------------------------------------------------

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        """Atomically claim up to ``limit`` due tasks of ``queue``: highest ``priority``
        first, and within one priority oldest due first — or, when the queue's own control
        (key ``*``) asks for it, by aged due time (``aging``, capability ``priority_aging``)
        and shared among the groups of its tasks (``fair``, capability ``fair_shares``): see
        :class:`~rdq.spi.ClaimOrder`.

        Due means PENDING with ``next_attempt_at <= now`` or IN_FLIGHT with
        ``lease_expires_at <= now`` (a lost lease), by the store's clock, compared at
        microsecond precision; a lost lease's due time is its ``lease_expires_at``. A store
        with ``control`` takes a task only when every control that applies to it lets it
        (see :class:`~rdq.spi.Control`), skipping the others, in the same atomic step. Each
        claimed task becomes IN_FLIGHT with ``lease_expires_at = now + lease``,
        ``claimed_at = now``, ``claimed_by = worker_id`` and a fresh random token never
        handed out before for this task (not even before a redrive). Reclaiming a lost
        lease appends a ``LEASE_EXPIRED`` attempt (see :class:`~rdq.spi.Attempt` for its
        fields) and increments ``attempt_count`` in the same atomic step. No two claimants
        ever hold valid leases on the same task. Returns an empty list when nothing is due;
        never blocks on other claimants. A corrupt stored task is claimed and returned with
        ``corrupt`` set; it never makes the call raise."""

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        """Set the lease of a claimed task to the store's now + ``lease`` (not the old expiry
        + ``lease``); return the new expiry.

        Under a concurrency limit (``control``): a live lease is always extended (it holds its
        slots, whatever the limits say now), but a lapsed one holds none (see
        :class:`~rdq.spi.Control`), and extending it takes its slots again — it is extended
        only when every concurrency limit of the task's keys has a free slot now, and raises
        ``StaleClaim`` (changing nothing) when another task took one meanwhile; its holder may
        still resolve it. Pauses, gates and rates do not apply: an extension is no claim
        (:func:`~rdq.spi.slots_free` is the rule as code).

        Raises ``StaleClaim`` (changing nothing) if ``token`` is not the current token of an
        IN_FLIGHT task, ``NotFound`` if the task does not exist."""

    # --- resolution (fenced) ---------------------------------------------------------------
    #
    # A token stays current until the task is claimed again, resolved or cancelled: a lease
    # that lapsed but was not yet reclaimed can still be resolved by its holder, and extended
    # (unless another task took its concurrency slot meanwhile: see ``extend_lease``).
    # Once another claimant reclaims the task (or an operator cancels it), the old token is
    # stale for good. Resolution times (completed_at, dead_lettered_at) are the store's now,
    # never the attempt's finished_at.

    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        """Failure path: append ``attempt`` (earlier attempts kept), increment
        ``attempt_count``, set PENDING due at ``next_at`` and clear the lease, token,
        ``claimed_by`` and ``claimed_at``, atomically.

        Raises ``StaleClaim`` (changing nothing) on a token that is not current,
        ``NotFound`` if the task does not exist."""

    async def complete(
        self, task_id: str, token: str, attempt: Attempt, *, discard: bool = False
    ) -> None:
        """Success path: append ``attempt``, increment ``attempt_count``, set SUCCEEDED with
        ``completed_at`` = now, clear the lease, atomically. Fenced like ``reschedule``.

        (``discard_succeeded``) With ``discard``, delete the task instead, in the same atomic
        step that checks the token, as ``purge`` deletes one: with its dedup key and its hold
        on a payload reference, so that ``get`` raises ``NotFound``, no listing or count holds
        it and its id may be admitted again. Fenced the same way: a token that is not current
        raises ``StaleClaim`` and deletes nothing; a second call for a task already deleted
        raises ``NotFound`` (where a kept one raises ``StaleClaim``). A store without the
        flag raises ``Unsupported`` and changes nothing (``StorageBase`` does so for it)."""

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        """Give up: append ``attempt``, increment ``attempt_count``, set DEAD with
        ``dead_lettered_at`` = now, clear the lease, atomically. Fenced like ``reschedule``."""

    # --- DLQ -------------------------------------------------------------------------------

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        """One page of the DLQ of ``queue``, ordered by ``(dead_lettered_at, id)``.

        Returns the tasks and an opaque cursor for the next page (``None`` when this page is
        the last). Paging never skips or repeats a task while new ones are dead-lettered.
        Attempt records are omitted (``attempts=[]``) unless ``page.include_attempts``.
        A store without ``filter_pushdown`` may ignore ``dlq_filter`` (the engine filters).
        Raises ``StaleCursor`` for a cursor that is malformed or from another queue/filter."""

    async def get(self, task_id: str) -> Envelope:
        """The task in any status, with its full attempt history. ``NotFound`` if absent."""

    async def redrive(self, queue: str, selector: Selector) -> int:
        """Return the selected DEAD tasks of ``queue`` to PENDING, due now, with
        ``attempt_count=0``, ``redrive_count+1`` and ``dead_lettered_at`` cleared, history
        kept. Ids that are not DEAD in this queue are ignored. Returns how many were
        redriven. A store without ``filter_pushdown`` may ignore a filter selector's filter
        only by raising ``NotImplementedError`` — never by acting on unselected tasks; the
        engine turns filters into id sets for such stores."""

    async def purge(self, queue: str, selector: Selector) -> int:
        """Delete the selected tasks of ``queue``; return how many were deleted. By ids:
        DEAD and CANCELLED tasks (others ignored); by filter: DEAD tasks that match (the same
        rule as ``redrive`` for stores without ``filter_pushdown``)."""

    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        """The DEAD tasks of ``queue`` grouped by ``(handler_ref, last error_type)``, largest
        group first (ties by handler_ref, then error_type with ``None`` last). ``StorageBase``
        computes it by paging through ``dlq_list``; stores that count in the backend advertise
        ``group_pushdown``."""

    # --- every task ------------------------------------------------------------------------

    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        """(``task_listing``) One page of the tasks of ``queue`` in ``task_filter.status``, ordered
        by status time then id (see :class:`TaskFilter`), and an opaque cursor for the next page
        (``None`` on the last page). Tasks whose status and status time do not change while paging
        are listed exactly once; a task that moves may be missed or seen twice. Attempts are omitted
        unless ``page.include_attempts``. A store without ``filter_pushdown`` must apply ``status``
        but may ignore the other filter fields (the engine filters). Raises ``StaleCursor`` for a
        cursor that is malformed or from another queue/filter."""

    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        """(``cancel``) Cancel the listed tasks of ``queue`` that are PENDING or IN_FLIGHT: each
        becomes CANCELLED with ``cancelled_at`` = now, its lease, token and claim fields cleared,
        atomically per task. A cancelled IN_FLIGHT task's token is stale from then on, so its
        holder's next ``extend_lease`` or resolution raises ``StaleClaim``, and it is never claimed
        again (not even once its old lease has passed). Other ids (unknown, in another queue,
        finished or already cancelled) are ignored; an id given twice counts once. Returns how many
        were cancelled. At most ``limits.MAX_SELECTOR_IDS`` ids (``limits.check_ids``:
        ``ValidationError`` naming ``ids`` or ``ids[i]``)."""

    async def list_queues(self) -> list[Stats]:
        """(``queue_listing``) The stats of every queue that holds at least one task (in any
        status), ordered by queue name; the same snapshot ``stats`` gives per queue (counts above
        ``limits.EXACT_COUNT_THRESHOLD`` may be estimates, named in ``Stats.estimated``)."""

    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        """(``import_tasks``) Store tasks exactly as given — status, attempts, counters and every
        timestamp — for moving tasks between stores. Idempotent by id: an id that exists in the same
        queue is left unchanged (False); ``IDConflict`` if it exists in another queue, and then
        nothing is stored. An IN_FLIGHT task is stored IN_FLIGHT with its ``lease_expires_at`` and
        no valid token, so it is reclaimed (with a ``LEASE_EXPIRED`` record naming its
        ``claimed_by`` and ``claimed_at``) once that passes. Returns one "stored" flag per task, in
        order; an id given twice is stored once (the second flag is False).

        Every task is checked with ``limits.check_imported_task`` before anything is stored:
        at most ``limits.MAX_LIMIT`` tasks per call; a corrupt task (``corrupt`` set), a task
        without ``created_at`` or without the time of its status (``STATUS_TIME_FIELDS``:
        a DEAD task needs ``dead_lettered_at``, …) or with a naive timestamp raises
        ``ValidationError`` naming the field, and nothing is stored."""

    # --- audit trail -----------------------------------------------------------------------

    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        """(``audit``) Store ``entry`` durably and return it with ``id`` (unique) and ``time`` (the
        store's now) set. Entries are never changed afterwards."""

    async def list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        """(``audit``) One page of audit entries, newest first (by ``time``, then ``id``
        descending), and an opaque cursor for the next page. Entries appended while paging never
        cause a skip or a repeat. Raises ``StaleCursor`` for a cursor that is malformed or from
        another filter."""

    # --- operations ------------------------------------------------------------------------

    async def now(self) -> datetime:
        """The store's clock: the time every due-ness decision of this store is made by.
        (``StorageBase`` has a default built on older operations: it enqueues, claims,
        completes and purges a probe task in the queue ``rdq-clock``.)"""

    async def stats(self, queue: str) -> Stats:
        """A snapshot of the queue's counts by the store's clock (see :class:`Stats`). An
        IN_FLIGHT task whose lease lapsed but was not reclaimed counts as ``in_flight``."""

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        """Delete SUCCEEDED tasks of ``queue`` completed before ``older_than`` and CANCELLED
        ones cancelled before it (the finished-task TTL); return how many were deleted."""

    def capabilities(self) -> Capabilities:
        """The optional accelerations this store offers; the same answer on every call (it
        needs no connection)."""

    # --- optional (advertised by capabilities) ---------------------------------------------

    async def wait_due(self, queue: str, timeout: float) -> bool:
        """(``notify``) Block until a task of ``queue`` may be due or ``timeout`` seconds
        pass. True when woken by a signal (at once when a task is already due), False on
        timeout; it never returns False before ``timeout`` has passed. Wake-ups may be
        spurious, but not every call: with nothing due and nothing happening in ``queue``, a
        call times out (a store that always returns True at once makes workers spin)."""

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        """(``batch_enqueue``) ``enqueue`` for many tasks in one round trip, with the same
        per-task semantics; returns one "stored" flag per task, in order. Either every valid
        task is admitted or, on error, none is."""

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        """(``batch_complete``) ``complete`` for many claimed tasks in one round trip.

        Each completion is fenced on its own token and applied atomically on its own, exactly
        as ``complete`` would; the result holds, per completion in order, ``None`` when it was
        applied or the ``StaleClaim`` / ``NotFound`` that ``complete`` would have raised (it is
        returned, not raised, so one lost lease does not hide the others' outcome). A
        completion with ``discard`` deletes its task as ``complete(..., discard=True)`` does
        (``discard_succeeded``; one call may mix both kinds). Invalid input raises
        ``ValidationError`` before anything changes, as does ``Unsupported`` for a completion
        with ``discard`` on a store without the flag. ``StorageBase`` provides a
        correct default that calls ``complete`` once per item."""

    # --- flow control (contract version 3, capability ``control``) ----------------------------

    async def list_controls(self, queue: str | None = None) -> list[Control]:
        """(``control``) The control records of ``queue`` (of every queue when ``None``), by
        queue then key, each with ``in_use`` filled in: the tasks with its key that hold a
        live lease now."""

    async def put_control(self, control: Control, *, expected_version: int) -> Control:
        """(``control``) Write ``control`` if the stored one of its (queue, key) has
        ``expected_version`` (0: there is none yet), atomically; return it as stored, with
        ``version`` one more than before and ``updated_at`` the store's now (``in_use`` is
        not stored). A change of ``rate``, ``per`` or ``burst`` refills the rate bucket.
        ``fair`` and ``aging`` (the queue's own control only) need ``fair_shares`` and
        ``priority_aging``: a store without the capability raises ``Unsupported`` naming it,
        storing nothing; from the write on, claims follow the new order, for tasks that
        were waiting already as for new ones.
        Raises :class:`~rdq.errors.ControlConflict` (changing nothing) when the version is not
        the expected one: of many callers that read one version, exactly one succeeds."""

    async def delete_control(self, queue: str, key: str, *, expected_version: int) -> bool:
        """(``control``) Delete the control of (queue, key) if its version is
        ``expected_version``; True if one was deleted, False if there was none.
        ``ControlConflict`` when it exists with another version."""

    async def retry_now(self, queue: str, task_ids: Sequence[str]) -> int:
        """(``control``) Make the listed PENDING tasks of ``queue`` that are not yet due due
        at the store's now (an operator's "retry now" for a task waiting out its backoff);
        others are ignored, an id given twice counts once. Returns how many were moved."""

    # --- the fleet (contract version 3) --------------------------------------------------------

    async def heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        """(``worker_registry``) Store ``info`` under its ``id`` (replacing what the worker
        said before) with ``seen_at`` = the store's now, and ``started_at`` = the store's now
        at the first heartbeat of that id (kept afterwards); return it as stored."""

    async def list_workers(self) -> list[WorkerInfo]:
        """(``worker_registry``) Every registered worker, by id."""

    async def remove_worker(self, worker_id: str) -> bool:
        """(``worker_registry``) Forget a worker (it stopped); True if it was registered."""

    async def purge_workers(self, seen_before: datetime) -> int:
        """(``worker_registry``) Forget the workers last seen before ``seen_before``; return
        how many."""

    async def add_counts(self, counts: Sequence[Counts]) -> None:
        """(``counters``) Add each entry to the stored counts of its (queue, minute),
        atomically per entry: concurrent additions from many workers never lose one."""

    async def read_counts(self, queue: str | None, since: datetime) -> list[Counts]:
        """(``counters``) The counts of ``queue`` (of every queue when ``None``) of the
        minutes from ``since`` on, by queue then minute."""

    async def purge_counts(self, before: datetime) -> int:
        """(``counters``) Delete the counts of minutes before ``before``; return how many
        (queue, minute) entries were deleted."""

    # --- what the store keeps, and for how long (contract version 5) ---------------------------

    async def held_payload_refs(self, refs: Sequence[str]) -> set[str]:
        """(``payload_refs``) Which of ``refs`` some stored task carries in its
        ``rdq-payload-ref`` header (:data:`~rdq.spi.PAYLOAD_REF_HEADER`), in any status and
        any queue: a task admitted, imported or changed (a dedup replacement writes its
        headers) carries its reference from then on, and no longer once it is deleted
        (purged, expired, the finished-task TTL) or its headers changed. Answered from an
        index, not a scan of every task. At most ``bounds.MAX_LIMIT`` references of at most
        ``bounds.MAX_PAYLOAD_REF_LENGTH`` characters each (``ValidationError`` naming
        ``refs`` or ``refs[i]``). The engine deletes a blob only when no task holds its
        reference."""

    async def admit(
        self, task: Envelope, dedup: Dedup, *, delay: timedelta | None = None
    ) -> Admitted:
        """(``dedup``) ``enqueue`` for a task submitted with a dedup key, in one atomic step:
        decide whether the key is held (see :class:`~rdq.spi.Dedup`), then add the task and
        give it the key (``added``), or leave, extend or replace the holder as ``dedup.mode``
        says. Of any number of concurrent admissions of one key, exactly one adds a task
        while the key is held: no two live tasks ever hold a key. Returns what was done and
        the task that holds the key now.

        Idempotent by id first, as ``enqueue``: a task whose id exists in the same queue is
        ``skipped`` (nothing changes, the key untouched), in another queue ``IDConflict``.
        A key held by a task of another queue raises :class:`~rdq.errors.DedupConflict`
        (keys are unique across queues, as ids are) and changes nothing. Times are the
        store's: the window from its now, the debounced due time its now + ``delay`` (or the
        task's ``next_attempt_at``) capped at the holder's ``created_at`` + ``max_age``.
        ``replace`` and ``debounce`` change the holder's ``payload`` and ``headers`` only
        (and, for ``debounce``, its due time); a holder that is not PENDING is left alone
        (``skipped``)."""

    async def expire_tasks(self, queue: str, task_ids: Sequence[str], before: datetime) -> int:
        """(``retention``) Delete the listed tasks of ``queue`` that are finished — DEAD,
        SUCCEEDED or CANCELLED — with their status time (``dead_lettered_at``,
        ``completed_at``, ``cancelled_at``) before ``before``, each atomically; return how many
        were deleted. Every other id is left alone: unknown, of another queue, PENDING or
        IN_FLIGHT, or finished at or after ``before`` — so a task redriven and dead-lettered
        again since the caller read it stays (its new ``dead_lettered_at`` is the store's
        now). An id given twice counts once; at most ``bounds.MAX_SELECTOR_IDS`` ids
        (``ValidationError`` naming ``ids`` or ``ids[i]``); a naive ``before`` is a
        ``ValidationError`` naming ``before``.

        This is the retention step: the engine reads finished tasks past their time to live,
        archives them, then expires exactly those, so a task leaves the store only once it
        is archived. ``StorageBase`` has a default built on ``get``, ``purge`` and
        ``purge_succeeded`` (see ``Capabilities.retention`` for what it cannot promise)."""

    async def enqueue_in(
        self, connection: object, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        """(``transactional_enqueue``) Admit ``tasks`` on ``connection``, a connection of the
        application's own, inside its transaction: they are stored when it commits and never
        exist if it rolls back. Otherwise as ``enqueue_batch``; ``IDConflict`` leaves nothing
        of the call stored and the transaction usable."""

    def reopen(self) -> Storage | None:
        """(``reopen``) A new, unconnected store on the same data with connections of its
        own (usable from another thread's event loop), or ``None`` when this store cannot be
        opened twice."""

    async def backup(self, target: str, *, overwrite: bool = False) -> Backup:
        """(``backup``) Write a copy of the store's data to the file ``target`` while the store
        keeps serving: one consistent snapshot that holds every task acknowledged before the
        call began. The copy is written beside ``target`` as ``<target>.partial``, checked,
        and only then put in place, so ``target`` is either absent, the old file, or a checked
        copy; the operation timeout does not bound it. ``ValidationError`` (field ``target``)
        when ``target`` exists and ``overwrite`` is false; ``StorageError`` when the copy
        fails a check (nothing is left behind)."""
