"""The ``Storage`` protocol: the contract every rdq backend implements.

A storage plugin stores tasks, decides due-ness by *its own clock*, leases claims with fencing
tokens and applies each mutation atomically. It never interprets a payload and never sees a
retry policy: the engine makes every decision. ``rdq_compliance.StorageSuite`` checks every
promise written here.

Every operation validates its input with :mod:`rdq.spi.limits` and raises
:class:`~rdq.errors.ValidationError` (naming the field) before touching stored state. Driver
exceptions never escape unwrapped: an unreachable backend raises
:class:`~rdq.errors.StorageUnavailable`, anything else a :class:`~rdq.errors.StorageError`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from rdq.errors import NotFound, StaleClaim
from rdq.spi._models import (
    Attempt,
    Capabilities,
    Claimed,
    Completion,
    DLQFilter,
    Envelope,
    Page,
    Selector,
    Stats,
)

__all__ = ["Storage", "StorageBase"]


@runtime_checkable
class Storage(Protocol):
    """The thirteen operations of the contract, plus lifecycle and the optional extras."""

    # --- lifecycle -------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open connections. Called by ``async with``; idempotent.

        Raises ``StorageUnavailable`` (naming host and port where there is one) when the
        backend cannot be reached or refuses the credentials."""

    async def aclose(self) -> None:
        """Release every connection. Idempotent; the store is unusable afterwards."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def migrate(self) -> None:
        """Create or upgrade the schema (tables, indexes, scripts). Idempotent, and safe when
        several processes run it at once."""

    # --- admission -------------------------------------------------------------------------

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        """Admit ``task``; return True if it was stored, False if it already existed.

        The store sets ``status=PENDING``, ``created_at`` to its own now, clears lease and
        completion fields, and makes the task due at ``task.next_attempt_at`` if given, else at
        its own now plus ``delay`` (default: now). All other fields, unknown ones in
        ``extra`` included, are stored as given and returned unchanged by ``get``.

        Idempotent by id within a queue: enqueueing an id that exists in the same queue changes
        nothing and returns False. Raises ``IDConflict`` if the id exists in another queue."""

    # --- claiming --------------------------------------------------------------------------

    async def claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claimed]:
        """Atomically claim up to ``limit`` due tasks of ``queue``, oldest due first.

        Due means PENDING with ``next_attempt_at <= now`` or IN_FLIGHT with
        ``lease_expires_at <= now`` (a lost lease), by the store's clock. Each claimed task
        becomes IN_FLIGHT with ``lease_expires_at = now + lease`` and a fresh random token.
        Reclaiming a lost lease appends a ``LEASE_EXPIRED`` attempt (and increments
        ``attempt_count``) in the same atomic step. No two claimants ever hold valid leases on
        the same task. Returns an empty list when nothing is due; never blocks on other
        claimants."""

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        """Set the lease of a claimed task to now + ``lease``; return the new expiry.

        Raises ``StaleClaim`` (changing nothing) if ``token`` is not the current token of an
        IN_FLIGHT task, ``NotFound`` if the task does not exist."""

    # --- resolution (fenced) ---------------------------------------------------------------
    #
    # A token stays current until the task is claimed again or resolved: a lease that lapsed
    # but was not yet reclaimed can still be extended or resolved by its holder. Once another
    # claimant reclaims the task, the old token is stale for good.

    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        """Failure path: append ``attempt``, increment ``attempt_count``, set PENDING due at
        ``next_at`` and clear the lease and token, atomically.

        Raises ``StaleClaim`` (changing nothing) on a token that is not current,
        ``NotFound`` if the task does not exist."""

    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        """Success path: append ``attempt``, increment ``attempt_count``, set SUCCEEDED with
        ``completed_at`` = now, clear the lease, atomically. Fenced like ``reschedule``."""

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
        ``attempt_count=0`` and ``redrive_count+1``, history kept. Ids that are not DEAD in
        this queue are ignored. Returns how many were redriven. Selecting by filter needs
        ``filter_pushdown`` (the engine turns filters into id sets otherwise)."""

    async def purge(self, queue: str, selector: Selector) -> int:
        """Delete the selected DEAD tasks of ``queue``; return how many were deleted."""

    # --- operations ------------------------------------------------------------------------

    async def stats(self, queue: str) -> Stats:
        """A snapshot of the queue's counts by the store's clock (see :class:`Stats`)."""

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        """Delete SUCCEEDED tasks of ``queue`` completed before ``older_than``; return how
        many were deleted."""

    def capabilities(self) -> Capabilities:
        """The optional accelerations this store offers."""

    # --- optional (advertised by capabilities) ---------------------------------------------

    async def wait_due(self, queue: str, timeout: float) -> bool:
        """(``notify``) Block until a task of ``queue`` may be due or ``timeout`` seconds
        pass. True when woken by a signal, False on timeout. Wake-ups may be spurious."""

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
        returned, not raised, so one lost lease does not hide the others' outcome). Invalid
        input raises ``ValidationError`` before anything changes. ``StorageBase`` provides a
        correct default that calls ``complete`` once per item."""


class StorageBase(abc.ABC):
    """A convenient base for plugins: the context-manager plumbing and the optional
    operations' defaults. Subclasses implement the abstract operations."""

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def connect(self) -> None:  # noqa: B027 - optional hook
        """Open connections (no-op by default)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections (no-op by default)."""

    async def migrate(self) -> None:  # noqa: B027 - optional hook
        """Create the schema (no-op by default)."""

    @abc.abstractmethod
    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool: ...

    @abc.abstractmethod
    async def claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claimed]: ...

    @abc.abstractmethod
    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime: ...

    @abc.abstractmethod
    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None: ...

    @abc.abstractmethod
    async def complete(self, task_id: str, token: str, attempt: Attempt) -> None: ...

    @abc.abstractmethod
    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None: ...

    @abc.abstractmethod
    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]: ...

    @abc.abstractmethod
    async def get(self, task_id: str) -> Envelope: ...

    @abc.abstractmethod
    async def redrive(self, queue: str, selector: Selector) -> int: ...

    @abc.abstractmethod
    async def purge(self, queue: str, selector: Selector) -> int: ...

    @abc.abstractmethod
    async def stats(self, queue: str) -> Stats: ...

    @abc.abstractmethod
    async def purge_succeeded(self, queue: str, older_than: datetime) -> int: ...

    @abc.abstractmethod
    def capabilities(self) -> Capabilities: ...

    async def wait_due(self, queue: str, timeout: float) -> bool:
        raise NotImplementedError(f"{type(self).__name__} does not offer notify")

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        raise NotImplementedError(f"{type(self).__name__} does not offer batch_enqueue")

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        """One ``complete`` per item (correct, not faster); override it for one round trip
        and advertise ``batch_complete``."""
        results: list[StaleClaim | NotFound | None] = []
        for item in completions:
            try:
                await self.complete(item.task_id, item.token, item.attempt)
            except (StaleClaim, NotFound) as exc:
                results.append(exc)
            else:
                results.append(None)
        return results
