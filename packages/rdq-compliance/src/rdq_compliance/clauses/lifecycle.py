"""Lifecycle and the storage clock: operations only between ``connect`` and ``aclose``; the
operation timeout URL option; ``now()`` is the clock claims are made by."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from rdq.errors import ConfigError, NotConnected
from rdq.spi import (
    AuditEntry,
    Completion,
    Outcome,
    Page,
    Selector,
    Status,
    Storage,
    TaskFilter,
)
from rdq_compliance._fixtures import StorageOpener
from rdq_compliance._support import LONG_LEASE, attempt, claim_time, new_task

__all__ = ["ClockClauses", "LifecycleClauses"]

Operation = Callable[[Storage, str], Awaitable[object]]
_PAST = datetime(2000, 1, 1, tzinfo=UTC)

OPERATIONS: dict[str, Operation] = {
    "migrate": lambda s, q: s.migrate(),
    "enqueue": lambda s, q: s.enqueue(new_task(q)),
    "claim_due": lambda s, q: s.claim_due(q, 1, LONG_LEASE),
    "extend_lease": lambda s, q: s.extend_lease("kit-absent", "token", LONG_LEASE),
    "reschedule": lambda s, q: s.reschedule("kit-absent", "token", attempt(1), _PAST),
    "complete": lambda s, q: s.complete("kit-absent", "token", attempt(1, Outcome.SUCCEEDED)),
    "dead_letter": lambda s, q: s.dead_letter("kit-absent", "token", attempt(1)),
    "dlq_list": lambda s, q: s.dlq_list(q, None, Page()),
    "get": lambda s, q: s.get("kit-absent"),
    "redrive": lambda s, q: s.redrive(q, Selector.by_ids("kit-absent")),
    "purge": lambda s, q: s.purge(q, Selector.by_ids("kit-absent")),
    "dlq_groups": lambda s, q: s.dlq_groups(q),
    "list_tasks": lambda s, q: s.list_tasks(q, TaskFilter(status=Status.PENDING), Page()),
    "cancel": lambda s, q: s.cancel(q, ["kit-absent"]),
    "list_queues": lambda s, q: s.list_queues(),
    "import_tasks": lambda s, q: s.import_tasks([]),
    "append_audit": lambda s, q: s.append_audit(AuditEntry(actor="kit", action="x", queue=q)),
    "list_audit": lambda s, q: s.list_audit(None, Page()),
    "now": lambda s, q: s.now(),
    "stats": lambda s, q: s.stats(q),
    "purge_succeeded": lambda s, q: s.purge_succeeded(q, _PAST),
}
"""Every operation of the contract, called with valid arguments."""

OPTIONAL: dict[str, Operation] = {
    "notify": lambda s, q: s.wait_due(q, 0.01),
    "batch_enqueue": lambda s, q: s.enqueue_batch([new_task(q)]),
    "batch_complete": lambda s, q: s.complete_many(
        [Completion("kit-absent", "token", attempt(1, Outcome.SUCCEEDED))]
    ),
}
"""The optional operations, by the capability that advertises them."""


async def _assert_every_operation_refused(store: Storage, queue: str, when: str) -> None:
    operations = dict(OPERATIONS)
    capabilities = store.capabilities()
    operations.update({n: op for n, op in OPTIONAL.items() if getattr(capabilities, n)})
    allowed = []
    for name, operation in operations.items():
        try:
            await operation(store, queue)
        except NotConnected:
            continue
        except Exception as exc:
            allowed.append(f"{name} raised {type(exc).__name__}: {exc}")
        else:
            allowed.append(f"{name} succeeded")
    assert not allowed, f"operations {when} must raise NotConnected: " + "; ".join(allowed)


class LifecycleClauses:
    """Every operation (``migrate`` included) raises ``NotConnected`` before ``connect`` and
    after ``aclose``; both are idempotent and ``connect`` after ``aclose`` opens the store
    again; every store's URL takes the ``timeout`` option (seconds), and a bad value raises
    ``ConfigError`` naming ``timeout``."""

    since = 2

    @pytest.mark.asyncio
    async def test_every_operation_before_connect_raises_not_connected(
        self, storage: Storage, open_peer_storage: StorageOpener, queue: str
    ) -> None:
        unopened = open_peer_storage()
        await _assert_every_operation_refused(unopened, queue, "before connect")
        async with unopened as opened:
            await opened.migrate()
            await opened.enqueue(new_task(queue))

    @pytest.mark.asyncio
    async def test_every_operation_after_aclose_raises_not_connected_and_connect_reopens(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.aclose()
        await storage.aclose()  # idempotent
        await _assert_every_operation_refused(storage, queue, "after aclose")
        await storage.connect()
        await storage.connect()  # idempotent
        await storage.migrate()  # a store whose data lives only as long as it is open
        task = new_task(queue)
        assert await storage.enqueue(task) is True
        assert (await storage.get(task.id)).status == Status.PENDING

    @pytest.mark.asyncio
    async def test_the_operation_timeout_is_accepted_as_a_url_option(
        self, storage: Storage, open_peer_storage: StorageOpener, queue: str
    ) -> None:
        async with open_peer_storage(timeout="2.5") as store:
            task = new_task(queue)
            await store.enqueue(task)
            assert (await store.get(task.id)).id == task.id
            await store.now()

    @pytest.mark.asyncio
    async def test_a_bad_operation_timeout_in_the_url_raises_config_error_naming_it(
        self, storage: Storage, open_peer_storage: StorageOpener
    ) -> None:
        for bad in ("0", "-1", "soon"):
            with pytest.raises(ConfigError) as caught:
                async with open_peer_storage(timeout=bad):
                    pass
            assert caught.value.key == "timeout", f"timeout={bad}: {caught.value}"


class ClockClauses:
    """``now()`` reads the store's clock — the one every due-ness decision, claim time and
    status time of the store comes from — as a timezone-aware UTC datetime."""

    @pytest.mark.asyncio
    async def test_now_is_the_clock_the_store_claims_and_resolves_by(
        self, storage: Storage, queue: str
    ) -> None:
        before = await storage.now()
        assert before.utcoffset() == timedelta(0), "now() is timezone-aware UTC"
        task = new_task(queue)
        await storage.enqueue(task)
        claimed = (await storage.claim_due(queue, 1, LONG_LEASE))[0]
        await storage.complete(task.id, claimed.token, attempt(1, Outcome.SUCCEEDED))
        after = await storage.now()
        stored = await storage.get(task.id)
        assert stored.created_at is not None and stored.completed_at is not None
        readings = [before, stored.created_at, claim_time(claimed, LONG_LEASE)]
        readings += [stored.completed_at, after]
        assert readings == sorted(readings), (
            "now() before, created_at, the claim time, completed_at and now() after must "
            f"read in that order: {[r.isoformat() for r in readings]}"
        )
