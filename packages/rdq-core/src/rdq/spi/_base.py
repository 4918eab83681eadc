"""``StorageBase``: the common work of every store, so that a store writes only its driver
calls.

Each public operation of :class:`~rdq.spi.Storage` is written here once, as a template:

1. check that the store is open (``NotConnected`` otherwise);
2. validate every argument through :mod:`rdq.spi.bounds` (``ValidationError`` naming the field,
   before anything is touched);
3. call the store's ``_operation`` (``enqueue`` calls ``_enqueue``) with valid arguments, bounded
   by :attr:`StorageBase.operation_timeout` when the store sets one.

A store implements the ``_operations`` of contract version 1 (instantiating a store that lacks
one raises ``TypeError`` naming it), and those of
later versions that it offers, advertising each in :meth:`capabilities`. The later ones have
defaults here: built on the version-1 operations where that can be done correctly (``_now``,
``_dlq_groups``, ``_complete_many``), otherwise raising :class:`~rdq.errors.Unsupported`
naming the capability the store does not advertise.

A store written before this template overrode the public operations themselves; it keeps
working: an ``_operation`` whose public operation a subclass overrides is not required of it,
and such an override is put behind the template (:func:`rdq.spi._legacy.adopt`), so the
template's checks and promises (bounds, the operation timeout, the store-owned fields of a
new task) hold for it too.

The template is in layers: :mod:`rdq.spi._lifecycle` (opening, closing, the open check and the
operation timeout), :mod:`rdq.spi._flow_operations` (flow control, the worker registry and the
counters of contract versions 3 and 4), :mod:`rdq.spi._keeping_operations` (what a store keeps
and for how long, contract version 5) and this module (the rest of the operations, and the
check that a store implements those of version 1); :mod:`rdq.spi._legacy` puts the public
overrides of a store written before the template behind it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar, Self

from rdq.errors import NotFound, StaleClaim, ValidationError
from rdq.spi import bounds, defaults
from rdq.spi._keeping_operations import KeepingOperations
from rdq.spi._legacy import adopt
from rdq.spi._models import (
    Attempt,
    AuditEntry,
    AuditFilter,
    Backup,
    Claimed,
    Completion,
    DLQFilter,
    DLQGroup,
    Envelope,
    Page,
    Selector,
    Stats,
    TaskFilter,
)
from rdq.spi._protocol import Storage

__all__ = ["StorageBase"]

_VERSION_1 = (
    "enqueue",
    "claim_due",
    "extend_lease",
    "reschedule",
    "complete",
    "dead_letter",
    "dlq_list",
    "get",
    "redrive",
    "purge",
    "stats",
    "purge_succeeded",
)
"""The operations every store implements (a store without one cannot be instantiated)."""


class StorageBase(KeepingOperations):
    """A base for stores: lifecycle, validation, the operation timeout, and defaults for the
    operations added after contract version 1 (see the module docstring).

    Subclasses implement the abstract ``_operations`` and :meth:`capabilities`, put their
    connection set-up in :meth:`_open` and tear-down in :meth:`_close`, and set
    :attr:`operation_timeout` unless their driver bounds every call itself."""

    _unimplemented: ClassVar[tuple[str, ...]] = _VERSION_1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        adopt(cls, StorageBase)
        cls._unimplemented = tuple(
            name
            for name in _VERSION_1
            if getattr(cls, name) is getattr(StorageBase, name)
            and getattr(cls, f"_{name}") is getattr(StorageBase, f"_{name}")
        )
        cls._base_lifecycle = (
            cls.connect is StorageBase.connect and cls.aclose is StorageBase.aclose
        )

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        if cls._unimplemented:
            missing = ", ".join(f"_{name}" for name in cls._unimplemented)
            raise TypeError(
                f"Can't instantiate {cls.__name__}: it implements neither the operation nor "
                f"its template hook for {missing} (contract version 1 needs each)"
            )
        return super().__new__(cls)

    # --- the schema ------------------------------------------------------------------------

    async def migrate(self) -> list[str] | None:
        """Create or upgrade the schema (``_migrate``; not bounded by the operation
        timeout)."""
        self._check_open()
        return await self._migrate()

    async def _migrate(self) -> list[str] | None:
        """Nothing to do by default."""
        return []

    # --- admission -------------------------------------------------------------------------

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        self._check_open()
        bounds.check_task(task)
        bounds.check_delay(delay)
        return await self._run(self._enqueue(task, delay))

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        self._check_open()
        checked = bounds.check_tasks(tasks)
        bounds.check_delay(delay)
        if not checked:
            return []
        return await self._run(self._enqueue_batch(checked, delay))

    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        self._check_open()
        checked = bounds.check_imported_tasks(tasks)
        if not checked:
            return []
        return await self._run(self._import_tasks(checked))

    async def enqueue_in(
        self, connection: object, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        self._check_open()
        checked = bounds.check_tasks(tasks)
        bounds.check_delay(delay)
        if not checked:
            return []
        return await self._run(self._enqueue_in(connection, checked, delay))

    async def backup(self, target: str, *, overwrite: bool = False) -> Backup:
        """Checks the store is open and ``target`` is a path, then ``_backup``; unbounded by
        the operation timeout (a copy of a large store takes as long as it takes)."""
        self._check_open()
        if not isinstance(target, str) or not target.strip():
            raise ValidationError("must name a file", field="target")
        return await self._backup(target, overwrite)

    async def _enqueue(self, task: Envelope, delay: timedelta | None) -> bool:
        raise NotImplementedError("enqueue")

    async def _enqueue_batch(self, tasks: list[Envelope], delay: timedelta | None) -> list[bool]:
        raise self._unsupported("batch_enqueue")

    async def _import_tasks(self, tasks: list[Envelope]) -> list[bool]:
        raise self._unsupported("import_tasks")

    async def _backup(self, target: str, overwrite: bool) -> Backup:
        raise self._unsupported("backup")

    async def _enqueue_in(
        self, connection: object, tasks: list[Envelope], delay: timedelta | None
    ) -> list[bool]:
        raise self._unsupported("transactional_enqueue")

    # --- claiming --------------------------------------------------------------------------

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        self._check_open()
        bounds.check_queue(queue)
        bounds.check_limit(limit)
        bounds.check_lease(lease)
        bounds.check_worker_id(worker_id)
        return await self._run(self._claim_due(queue, limit, lease, worker_id))

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        self._check_open()
        bounds.check_task_id(task_id)
        bounds.check_token(token)
        bounds.check_lease(lease)
        return await self._run(self._extend_lease(task_id, token, lease))

    async def _claim_due(
        self, queue: str, limit: int, lease: timedelta, worker_id: str | None
    ) -> list[Claimed]:
        raise NotImplementedError("claim_due")

    async def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        raise NotImplementedError("extend_lease")

    # --- resolution (fenced) ---------------------------------------------------------------

    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        self._check_open()
        bounds.check_resolution(task_id, token, attempt)
        bounds.check_aware(next_at, "next_at")
        await self._run(self._reschedule(task_id, token, attempt, next_at))

    async def complete(
        self, task_id: str, token: str, attempt: Attempt, *, discard: bool = False
    ) -> None:
        """``_complete``, or with ``discard`` ``_discard_completed`` (``Unsupported`` unless the
        store advertises ``discard_succeeded``)."""
        self._check_open()
        bounds.check_resolution(task_id, token, attempt)
        bounds.check_discard(discard)
        if not discard:
            await self._run(self._complete(task_id, token, attempt))
            return
        if not self.capabilities().discard_succeeded:
            raise self._unsupported("discard_succeeded")
        await self._run(self._discard_completed(task_id, token, attempt))

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        self._check_open()
        bounds.check_resolution(task_id, token, attempt)
        await self._run(self._dead_letter(task_id, token, attempt))

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        self._check_open()
        checked = bounds.check_completions(completions)
        if not checked:
            return []
        if any(c.discard for c in checked) and not self.capabilities().discard_succeeded:
            raise self._unsupported("discard_succeeded")
        return await self._run(self._complete_many(checked))

    async def _reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        raise NotImplementedError("reschedule")

    async def _complete(self, task_id: str, token: str, attempt: Attempt) -> None:
        raise NotImplementedError("complete")

    async def _dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        raise NotImplementedError("dead_letter")

    async def _discard_completed(self, task_id: str, token: str, attempt: Attempt) -> None:
        """``complete`` that deletes the task (with its dedup key and payload reference) in the
        step that checks the token; implement it and advertise ``discard_succeeded``."""
        raise self._unsupported("discard_succeeded")

    async def _complete_many(
        self, completions: list[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        """One ``complete`` per item (correct, not faster); override it for one round trip
        and advertise ``batch_complete`` (an item with ``discard`` deletes its task: see
        ``_discard_completed``)."""
        return await defaults.complete_each(self, completions)

    # --- DLQ -------------------------------------------------------------------------------

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        self._check_open()
        bounds.check_queue(queue)
        if dlq_filter is not None:
            bounds.check_filter(dlq_filter)
        bounds.check_page(page)
        return await self._run(self._dlq_list(queue, dlq_filter, page))

    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        self._check_open()
        bounds.check_queue(queue)
        return await self._run(self._dlq_groups(queue))

    async def redrive(self, queue: str, selector: Selector) -> int:
        self._check_open()
        bounds.check_queue(queue)
        bounds.check_selector(selector)
        return await self._run(self._redrive(queue, selector))

    async def purge(self, queue: str, selector: Selector) -> int:
        self._check_open()
        bounds.check_queue(queue)
        bounds.check_selector(selector)
        return await self._run(self._purge(queue, selector))

    async def _dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        raise NotImplementedError("dlq_list")

    async def _dlq_groups(self, queue: str) -> list[DLQGroup]:
        """Pages through the whole DLQ with attempts (correct, not fast); override it to count
        in the backend and advertise ``group_pushdown``."""
        return await defaults.groups_by_paging(self, queue)

    async def _redrive(self, queue: str, selector: Selector) -> int:
        raise NotImplementedError("redrive")

    async def _purge(self, queue: str, selector: Selector) -> int:
        raise NotImplementedError("purge")

    # --- every task ------------------------------------------------------------------------

    async def get(self, task_id: str) -> Envelope:
        self._check_open()
        bounds.check_task_id(task_id)
        return await self._run(self._get(task_id))

    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        self._check_open()
        bounds.check_queue(queue)
        bounds.check_task_filter(task_filter)
        bounds.check_page(page)
        return await self._run(self._list_tasks(queue, task_filter, page))

    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        self._check_open()
        bounds.check_queue(queue)
        ids = list(dict.fromkeys(bounds.check_ids(task_ids)))
        if not ids:
            return 0
        return await self._run(self._cancel(queue, ids))

    async def list_queues(self) -> list[Stats]:
        self._check_open()
        return await self._run(self._list_queues())

    async def _get(self, task_id: str) -> Envelope:
        raise NotImplementedError("get")

    async def _list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        raise self._unsupported("task_listing")

    async def _cancel(self, queue: str, task_ids: list[str]) -> int:
        """``task_ids``: valid, each once."""
        raise self._unsupported("cancel")

    async def _list_queues(self) -> list[Stats]:
        raise self._unsupported("queue_listing")

    # --- audit trail -----------------------------------------------------------------------

    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        self._check_open()
        bounds.check_audit_entry(entry)
        return await self._run(self._append_audit(entry))

    async def list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        self._check_open()
        if audit_filter is not None:
            bounds.check_audit_filter(audit_filter)
        bounds.check_page(page)
        return await self._run(self._list_audit(audit_filter, page))

    async def _append_audit(self, entry: AuditEntry) -> AuditEntry:
        raise self._unsupported("audit")

    async def _list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        raise self._unsupported("audit")

    # --- operations ------------------------------------------------------------------------

    async def now(self) -> datetime:
        self._check_open()
        return await self._run(self._now())

    async def stats(self, queue: str) -> Stats:
        self._check_open()
        bounds.check_queue(queue)
        return await self._run(self._stats(queue))

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        self._check_open()
        bounds.check_queue(queue)
        bounds.check_aware(older_than, "older_than")
        return await self._run(self._purge_succeeded(queue, older_than))

    async def wait_due(self, queue: str, timeout: float) -> bool:
        """Not bounded by the operation timeout: ``timeout`` is its own."""
        self._check_open()
        bounds.check_queue(queue)
        bounds.check_wait(timeout)
        return await self._wait_due(queue, float(timeout))

    def reopen(self) -> Storage | None:
        """``None`` by default (no second store); override it and advertise ``reopen``."""
        return None

    async def _now(self) -> datetime:
        """Through a probe task (see :func:`rdq.spi.defaults.now_by_probe`); override it with
        one read of the backend's clock."""
        return await defaults.now_by_probe(self)

    async def _stats(self, queue: str) -> Stats:
        raise NotImplementedError("stats")

    async def _purge_succeeded(self, queue: str, older_than: datetime) -> int:
        raise NotImplementedError("purge_succeeded")

    async def _wait_due(self, queue: str, timeout: float) -> bool:
        raise self._unsupported("notify")
