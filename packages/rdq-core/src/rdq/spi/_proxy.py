"""``ForwardingStorage``: a store that forwards every operation to another, typed, with one hook
(:meth:`ForwardingStorage._forward`) that subclasses override to bound, count or break calls;
and :func:`adapt`, which gives a store implementing the bare protocol of an earlier contract the
operations added since (their defaults, or ``Unsupported``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Self, TypeVar

from rdq.errors import NotFound, StaleClaim, Unsupported
from rdq.spi import defaults
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
from rdq.spi._protocol import Storage

__all__ = ["ForwardingStorage", "adapt"]

T = TypeVar("T")


class ForwardingStorage:
    """Forwards every operation of :class:`~rdq.spi.Storage` to :attr:`inner`.

    Subclass it and override :meth:`_forward` to act on every call (its ``name`` is the
    operation's), or override single operations. Lifecycle calls (``connect``, ``aclose``,
    ``migrate``) and ``capabilities``/``reopen`` are forwarded as they are."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    async def _forward(self, name: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run the forwarded ``call`` of operation ``name`` (override to wrap it)."""
        return await call()

    # --- lifecycle -------------------------------------------------------------------------

    async def connect(self) -> None:
        await self.inner.connect()

    async def aclose(self) -> None:
        await self.inner.aclose()

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

    async def migrate(self) -> list[str] | None:
        return await self.inner.migrate()

    def capabilities(self) -> Capabilities:
        return self.inner.capabilities()

    def reopen(self) -> Storage | None:
        return self.inner.reopen()

    # --- the operations --------------------------------------------------------------------

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        return await self._forward("enqueue", lambda: self.inner.enqueue(task, delay=delay))

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        return await self._forward(
            "enqueue_batch", lambda: self.inner.enqueue_batch(tasks, delay=delay)
        )

    async def enqueue_in(
        self, connection: object, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        return await self._forward(
            "enqueue_in", lambda: self.inner.enqueue_in(connection, tasks, delay=delay)
        )

    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        return await self._forward("import_tasks", lambda: self.inner.import_tasks(tasks))

    async def backup(self, target: str, *, overwrite: bool = False) -> Backup:
        return await self._forward("backup", lambda: self.inner.backup(target, overwrite=overwrite))

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        return await self._forward(
            "claim_due", lambda: self.inner.claim_due(queue, limit, lease, worker_id=worker_id)
        )

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        return await self._forward(
            "extend_lease", lambda: self.inner.extend_lease(task_id, token, lease)
        )

    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        await self._forward(
            "reschedule", lambda: self.inner.reschedule(task_id, token, attempt, next_at)
        )

    async def complete(
        self, task_id: str, token: str, attempt: Attempt, *, discard: bool = False
    ) -> None:
        if discard:
            await self._forward(
                "complete", lambda: self.inner.complete(task_id, token, attempt, discard=True)
            )
        else:  # a store of an earlier contract takes no discard
            await self._forward("complete", lambda: self.inner.complete(task_id, token, attempt))

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        return await self._forward("complete_many", lambda: self.inner.complete_many(completions))

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._forward("dead_letter", lambda: self.inner.dead_letter(task_id, token, attempt))

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return await self._forward("dlq_list", lambda: self.inner.dlq_list(queue, dlq_filter, page))

    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        return await self._forward("dlq_groups", lambda: self.inner.dlq_groups(queue))

    async def redrive(self, queue: str, selector: Selector) -> int:
        return await self._forward("redrive", lambda: self.inner.redrive(queue, selector))

    async def purge(self, queue: str, selector: Selector) -> int:
        return await self._forward("purge", lambda: self.inner.purge(queue, selector))

    async def get(self, task_id: str) -> Envelope:
        return await self._forward("get", lambda: self.inner.get(task_id))

    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return await self._forward(
            "list_tasks", lambda: self.inner.list_tasks(queue, task_filter, page)
        )

    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        return await self._forward("cancel", lambda: self.inner.cancel(queue, task_ids))

    async def list_queues(self) -> list[Stats]:
        return await self._forward("list_queues", self.inner.list_queues)

    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        return await self._forward("append_audit", lambda: self.inner.append_audit(entry))

    async def list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        return await self._forward("list_audit", lambda: self.inner.list_audit(audit_filter, page))

    async def now(self) -> datetime:
        return await self._forward("now", self.inner.now)

    async def list_controls(self, queue: str | None = None) -> list[Control]:
        return await self._forward("list_controls", lambda: self.inner.list_controls(queue))

    async def put_control(self, control: Control, *, expected_version: int) -> Control:
        return await self._forward(
            "put_control",
            lambda: self.inner.put_control(control, expected_version=expected_version),
        )

    async def delete_control(self, queue: str, key: str, *, expected_version: int) -> bool:
        return await self._forward(
            "delete_control",
            lambda: self.inner.delete_control(queue, key, expected_version=expected_version),
        )

    async def retry_now(self, queue: str, task_ids: Sequence[str]) -> int:
        return await self._forward("retry_now", lambda: self.inner.retry_now(queue, task_ids))

    async def heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        return await self._forward("heartbeat_worker", lambda: self.inner.heartbeat_worker(info))

    async def list_workers(self) -> list[WorkerInfo]:
        return await self._forward("list_workers", self.inner.list_workers)

    async def remove_worker(self, worker_id: str) -> bool:
        return await self._forward("remove_worker", lambda: self.inner.remove_worker(worker_id))

    async def purge_workers(self, seen_before: datetime) -> int:
        return await self._forward("purge_workers", lambda: self.inner.purge_workers(seen_before))

    async def add_counts(self, counts: Sequence[Counts]) -> None:
        await self._forward("add_counts", lambda: self.inner.add_counts(counts))

    async def read_counts(self, queue: str | None, since: datetime) -> list[Counts]:
        return await self._forward("read_counts", lambda: self.inner.read_counts(queue, since))

    async def purge_counts(self, before: datetime) -> int:
        return await self._forward("purge_counts", lambda: self.inner.purge_counts(before))

    async def stats(self, queue: str) -> Stats:
        return await self._forward("stats", lambda: self.inner.stats(queue))

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        return await self._forward(
            "purge_succeeded", lambda: self.inner.purge_succeeded(queue, older_than)
        )

    async def wait_due(self, queue: str, timeout: float) -> bool:
        return await self._forward("wait_due", lambda: self.inner.wait_due(queue, timeout))

    async def expire_tasks(self, queue: str, task_ids: Sequence[str], before: datetime) -> int:
        return await self._forward(
            "expire_tasks", lambda: self.inner.expire_tasks(queue, task_ids, before)
        )

    async def admit(
        self, task: Envelope, dedup: Dedup, *, delay: timedelta | None = None
    ) -> Admitted:
        return await self._forward("admit", lambda: self.inner.admit(task, dedup, delay=delay))

    async def held_payload_refs(self, refs: Sequence[str]) -> set[str]:
        return await self._forward("held_payload_refs", lambda: self.inner.held_payload_refs(refs))


_OPTIONAL = {
    "enqueue_in": "transactional_enqueue",
    "import_tasks": "import_tasks",
    "list_tasks": "task_listing",
    "cancel": "cancel",
    "list_queues": "queue_listing",
    "append_audit": "audit",
    "list_audit": "audit",
    "enqueue_batch": "batch_enqueue",
    "wait_due": "notify",
    "list_controls": "control",
    "put_control": "control",
    "delete_control": "control",
    "retry_now": "control",
    "heartbeat_worker": "worker_registry",
    "list_workers": "worker_registry",
    "remove_worker": "worker_registry",
    "purge_workers": "worker_registry",
    "add_counts": "counters",
    "read_counts": "counters",
    "purge_counts": "counters",
    "backup": "backup",
    "admit": "dedup",
    "held_payload_refs": "payload_refs",
}
"""Operations a bare store of an earlier contract may lack, and their capability."""

_DEFAULTED = ("now", "dlq_groups", "complete_many", "reopen", "expire_tasks")


class _Adapted(ForwardingStorage):
    """A bare store of an earlier contract with the later operations filled in."""

    def __init__(self, inner: Any, missing: set[str]) -> None:
        super().__init__(inner)
        self._missing = missing

    async def _forward(self, name: str, call: Callable[[], Awaitable[T]]) -> T:
        if name in self._missing:
            raise Unsupported(type(self.inner).__name__, _OPTIONAL[name])
        return await call()

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        if self.inner.capabilities().claim_holder:
            return await self.inner.claim_due(queue, limit, lease, worker_id=worker_id)
        return await self.inner.claim_due(queue, limit, lease)  # version 1: no worker_id

    def reopen(self) -> Storage | None:
        if "reopen" in self._missing:
            return None
        return self.inner.reopen()

    async def now(self) -> datetime:
        if "now" in self._missing:
            return await defaults.now_by_probe(self)
        return await self.inner.now()

    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        if "dlq_groups" in self._missing:
            return await defaults.groups_by_paging(self, queue)
        return await self.inner.dlq_groups(queue)

    async def complete(
        self, task_id: str, token: str, attempt: Attempt, *, discard: bool = False
    ) -> None:
        if discard and not self.inner.capabilities().discard_succeeded:
            raise Unsupported(type(self.inner).__name__, "discard_succeeded")
        await super().complete(task_id, token, attempt, discard=discard)

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        if any(c.discard for c in completions) and not self.inner.capabilities().discard_succeeded:
            raise Unsupported(type(self.inner).__name__, "discard_succeeded")
        if "complete_many" in self._missing:
            return await defaults.complete_each(self, completions)
        return await self.inner.complete_many(completions)

    async def expire_tasks(self, queue: str, task_ids: Sequence[str], before: datetime) -> int:
        if "expire_tasks" in self._missing:
            return await defaults.expire_by_purge(self, queue, task_ids, before)
        return await self.inner.expire_tasks(queue, task_ids, before)


def adapt(store: Any) -> Storage:
    """``store`` itself when it has every operation of the contract (every
    :class:`~rdq.spi.StorageBase` has), else a :class:`ForwardingStorage` over it in which the
    operations it lacks have their defaults (``now``, ``dlq_groups``, ``complete_many``,
    ``reopen``, ``expire_tasks``) or raise :class:`~rdq.errors.Unsupported` naming their
    capability."""
    missing = {name for name in (*_OPTIONAL, *_DEFAULTED) if not hasattr(store, name)}
    if not missing:
        return store  # type: ignore[no-any-return]
    return _Adapted(store, missing)
