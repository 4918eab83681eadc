"""The store's lifecycle and what it advertises."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from rdq.errors import NotConnected
from rdq.spi import (
    Attempt,
    AuditEntry,
    Capabilities,
    Completion,
    Envelope,
    Outcome,
    Page,
    Selector,
    Status,
    TaskFilter,
)
from rdq_mongo import MongoStorage

_ATTEMPT = Attempt(number=1, outcome=Outcome.SUCCEEDED)
_WHEN = datetime(2030, 1, 1, tzinfo=UTC)

OPERATIONS: dict[str, Callable[[MongoStorage], Awaitable[object]]] = {
    "migrate": lambda s: s.migrate(),
    "enqueue": lambda s: s.enqueue(Envelope(id="t", queue="q", handler_ref="a:b")),
    "enqueue_batch": lambda s: s.enqueue_batch([Envelope(id="t", queue="q", handler_ref="a:b")]),
    "claim_due": lambda s: s.claim_due("q", 1, timedelta(seconds=30)),
    "extend_lease": lambda s: s.extend_lease("t", "token", timedelta(seconds=30)),
    "reschedule": lambda s: s.reschedule("t", "token", _ATTEMPT, _WHEN),
    "complete": lambda s: s.complete("t", "token", _ATTEMPT),
    "complete_many": lambda s: s.complete_many([Completion("t", "token", _ATTEMPT)]),
    "dead_letter": lambda s: s.dead_letter("t", "token", _ATTEMPT),
    "dlq_list": lambda s: s.dlq_list("q", None, Page()),
    "get": lambda s: s.get("t"),
    "redrive": lambda s: s.redrive("q", Selector.by_ids("t")),
    "purge": lambda s: s.purge("q", Selector.by_ids("t")),
    "stats": lambda s: s.stats("q"),
    "purge_succeeded": lambda s: s.purge_succeeded("q", _WHEN),
    "wait_due": lambda s: s.wait_due("q", 0.1),
    "now": lambda s: s.now(),
    "list_tasks": lambda s: s.list_tasks("q", TaskFilter(status=Status.PENDING), Page()),
    "cancel": lambda s: s.cancel("q", ["t"]),
    "list_queues": lambda s: s.list_queues(),
    "dlq_groups": lambda s: s.dlq_groups("q"),
    "import_tasks": lambda s: s.import_tasks([]),
    "append_audit": lambda s: s.append_audit(AuditEntry(actor="a", action="b", queue="q")),
    "list_audit": lambda s: s.list_audit(None, Page()),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.asyncio
async def test_every_operation_before_connect_raises_not_connected(operation: str) -> None:
    storage = MongoStorage.from_url("mongodb://127.0.0.1:1/never")
    with pytest.raises(NotConnected) as caught:
        await OPERATIONS[operation](storage)
    assert caught.value.closed is False


@pytest.mark.asyncio
async def test_after_aclose_operations_raise_not_connected_and_connect_reopens(
    database_url: str,
) -> None:
    storage = MongoStorage.from_url(database_url)
    await storage.connect()
    await storage.connect()  # idempotent
    await storage.migrate()
    assert await storage.enqueue(Envelope(id="kept", queue="q", handler_ref="a:b"))
    await storage.aclose()
    await storage.aclose()  # idempotent
    assert not _is_open(storage)
    for name, operation in OPERATIONS.items():
        with pytest.raises(NotConnected) as caught:
            await operation(storage)
        assert caught.value.closed is True, name

    async with storage:
        assert _is_open(storage)
        assert (await storage.get("kept")).id == "kept"
        await storage._connection().client.drop_database(storage.config.database)
    assert not _is_open(storage)


def _is_open(storage: MongoStorage) -> bool:
    return storage.is_open


EXPECTED = Capabilities(
    contract_version=5,
    notify=True,
    filter_pushdown=True,
    batch_enqueue=True,
    batch_complete=True,
    group_pushdown=True,
    priorities=True,
    claim_holder=True,
    cancel=True,
    task_listing=True,
    queue_listing=True,
    import_tasks=True,
    audit=True,
    reopen=True,
    control=True,
    worker_registry=True,
    counters=True,
    fair_shares=True,
    priority_aging=True,
    retention=True,
    dedup=True,
    discard_succeeded=True,
    transactional_enqueue=False,
)
"""What the store advertises, connected or not (``rdq_notify=off`` turns ``notify`` off)."""


@pytest.mark.asyncio
async def test_capabilities_are_exactly_these_before_connect_while_open_and_after_aclose(
    database_url: str,
) -> None:
    storage = MongoStorage.from_url(database_url)
    assert storage.capabilities() == EXPECTED
    async with storage:
        assert storage.capabilities() == EXPECTED
    assert storage.capabilities() == EXPECTED
    quiet = MongoStorage.from_url(database_url + "&rdq_notify=off")
    assert quiet.capabilities() == msgspec.structs.replace(EXPECTED, notify=False)
