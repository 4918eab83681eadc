"""Stores written before :class:`~rdq.spi.StorageBase` was a template: they override the
public operations themselves (as the guide of contract version 1 showed) and implement none of
the ``_operation`` hooks. :func:`adopt` puts such an override behind the template: the public
operation runs the base's again — the open check, the validation of every argument, the
operation timeout — which calls the store's own override as its hook.

So a promise the template keeps for every store holds for an old store too, without a change
to it: a ``delay`` out of bounds is refused before it reaches the store, and a task is admitted
without the store-owned fields added after version 1 (``claimed_by``, ``claimed_at``,
``cancelled_at``: an old store did not know to clear them) — the hook is given a copy with
every store-owned field cleared, the caller's envelope untouched.

An override is adopted only when its hook is the base's own default (the store implements the
operation, not the hook), and it takes effect only for a store that states contract version 1
(or none): the base became a template with version 2, so a store of a later version that
overrides a public operation does so deliberately (a binding that forwards every call to
another implementation, which validates on its own) and is called as written, as is a store
built on the template that also overrides a public operation (to wrap it, or to call
``super()``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import msgspec

from rdq.spi._models import Envelope

__all__ = ["ADOPTED", "adopt"]

ADOPTED = (
    "enqueue",
    "enqueue_batch",
    "enqueue_in",
    "import_tasks",
    "claim_due",
    "extend_lease",
    "reschedule",
    "complete",
    "dead_letter",
    "complete_many",
    "dlq_list",
    "dlq_groups",
    "redrive",
    "purge",
    "get",
    "list_tasks",
    "cancel",
    "list_queues",
    "append_audit",
    "list_audit",
    "now",
    "stats",
    "purge_succeeded",
    "wait_due",
    "list_controls",
    "put_control",
    "delete_control",
    "retry_now",
    "heartbeat_worker",
    "list_workers",
    "remove_worker",
    "purge_workers",
    "add_counts",
    "read_counts",
    "purge_counts",
)
"""The public operations whose override :func:`adopt` puts behind the template."""

_OWNED = {
    "lease_expires_at": None,
    "claimed_by": None,
    "claimed_at": None,
    "completed_at": None,
    "dead_lettered_at": None,
    "cancelled_at": None,
}
"""The fields ``enqueue`` promises to leave empty (the store sets status and times)."""

Operation = Callable[..., Awaitable[Any]]


def _admitted(task: Envelope) -> Envelope:
    """A copy of ``task`` without the store-owned fields a new task starts without."""
    return msgspec.structs.replace(task, **_OWNED)


def _hook(name: str, own: Operation) -> Operation:
    """The hook the template calls (``_name``, with the template's arguments), calling the
    store's own public ``name``."""
    if name == "enqueue":

        async def enqueue(self: Any, task: Envelope, delay: timedelta | None) -> Any:
            return await own(self, _admitted(task), delay=delay)

        return enqueue
    if name == "enqueue_batch":

        async def enqueue_batch(
            self: Any, tasks: Sequence[Envelope], delay: timedelta | None
        ) -> Any:
            return await own(self, [_admitted(t) for t in tasks], delay=delay)

        return enqueue_batch
    if name == "enqueue_in":

        async def enqueue_in(
            self: Any, connection: object, tasks: Sequence[Envelope], delay: timedelta | None
        ) -> Any:
            return await own(self, connection, [_admitted(t) for t in tasks], delay=delay)

        return enqueue_in
    if name == "claim_due":

        async def claim_due(
            self: Any, queue: str, limit: int, lease: timedelta, worker_id: str | None
        ) -> Any:
            # a store of version 1 takes no worker_id (the engine passes one only with
            # claim_holder)
            holder = {} if worker_id is None else {"worker_id": worker_id}
            return await own(self, queue, limit, lease, **holder)

        return claim_due
    if name in ("put_control", "delete_control"):

        async def fenced(self: Any, *args: Any) -> Any:
            *given, expected_version = args
            return await own(self, *given, expected_version=expected_version)

        return fenced

    async def passed_on(self: Any, *args: Any) -> Any:
        return await own(self, *args)

    return passed_on


def _written_before_the_template(store: Any) -> bool:
    """Whether ``store`` states contract version 1 (or none)."""
    return bool(store.capabilities().contract_version < 2)


def _public(name: str, own: Operation, template: Operation) -> Operation:
    """The public operation of an adopting class: the template (which calls the adopted
    hook) for a store written before it, the store's own override for any other."""

    async def public(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _written_before_the_template(self):
            return await template(self, *args, **kwargs)
        return await own(self, *args, **kwargs)

    public.__name__ = name
    public.__doc__ = own.__doc__ or template.__doc__
    return public


def adopt(cls: type, base: type) -> None:
    """Put every public operation of ``cls`` that overrides ``base``'s template while its
    hook is ``base``'s default behind the template (see the module docstring)."""
    for name in ADOPTED:
        own = getattr(cls, name, None)
        template = getattr(base, name)
        if (
            own is None
            or own is template
            or getattr(cls, f"_{name}") is not getattr(base, f"_{name}")
        ):
            continue
        hook = _hook(name, own)
        hook.__name__ = f"_{name}"
        hook.__qualname__ = f"{cls.__qualname__}._{name}"
        hook.__doc__ = f"The store's own ``{name}``, called by the template (adopted)."
        public = _public(name, own, template)
        public.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, f"_{name}", hook)
        setattr(cls, name, public)
