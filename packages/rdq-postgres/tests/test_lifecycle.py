"""The store's lifecycle (``StorageBase``): nothing works before ``connect`` or after
``aclose``, ``connect`` after ``aclose`` reopens, and what the store advertises is pinned."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from rdq.errors import NotConnected
from rdq.spi import Capabilities, DLQFilter, Envelope, Page, Selector
from rdq_postgres import PostgresStorage

Operation = Callable[[PostgresStorage], Awaitable[object]]

OPERATIONS: dict[str, Operation] = {
    "migrate": lambda s: s.migrate(),
    "enqueue": lambda s: s.enqueue(Envelope(id="a", queue="q", handler_ref="m:f")),
    "enqueue_batch": lambda s: s.enqueue_batch([Envelope(id="a", queue="q", handler_ref="m:f")]),
    "claim_due": lambda s: s.claim_due("q", 1, timedelta(seconds=5)),
    "get": lambda s: s.get("a"),
    "dlq_list": lambda s: s.dlq_list("q", DLQFilter(), Page()),
    "redrive": lambda s: s.redrive("q", Selector.by_ids("a")),
    "purge": lambda s: s.purge("q", Selector.by_ids("a")),
    "stats": lambda s: s.stats("q"),
    "purge_succeeded": lambda s: s.purge_succeeded("q", datetime.now(UTC)),
    "wait_due": lambda s: s.wait_due("q", 0.01),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("name", OPERATIONS)
async def test_every_operation_before_connect_raises_not_connected(name: str) -> None:
    store = PostgresStorage.from_url("postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(NotConnected) as raised:
        await OPERATIONS[name](store)
    assert raised.value.closed is False


@pytest.mark.asyncio
@pytest.mark.parametrize("name", OPERATIONS)
async def test_every_operation_after_aclose_raises_not_connected(
    postgres_url: str, schema: str, name: str
) -> None:
    store = PostgresStorage.from_url(postgres_url, schema=schema)
    async with store:
        await store.migrate()
    with pytest.raises(NotConnected) as raised:
        await OPERATIONS[name](store)
    assert raised.value.closed is True


@pytest.mark.asyncio
async def test_connect_after_aclose_reopens_and_keeps_the_tasks(
    postgres_url: str, schema: str
) -> None:
    store = PostgresStorage.from_url(postgres_url, schema=schema)
    async with store:
        await store.migrate()
        assert await store.enqueue(Envelope(id="kept", queue="q", handler_ref="m:f"))
        assert await store.wait_due("q", 0.01) is True  # opens the LISTEN connection too
    assert not store.is_open
    await store.aclose()  # idempotent
    await store.connect()
    try:
        await store.connect()  # idempotent
        assert store.is_open
        assert (await store.get("kept")).id == "kept"
        assert await store.wait_due("q", 0.01) is True
    finally:
        await store.aclose()


def test_capabilities_are_pinned() -> None:
    store = PostgresStorage.from_url("postgresql://db/app")
    assert store.capabilities() == Capabilities(
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
        control=True,
        worker_registry=True,
        counters=True,
        fair_shares=True,
        priority_aging=True,
        retention=True,
        dedup=True,
        payload_refs=True,
        discard_succeeded=True,
        reopen=True,
        transactional_enqueue=True,
    )
    quiet = PostgresStorage.from_url("postgresql://db/app?notify=false")
    assert quiet.capabilities() == Capabilities(
        contract_version=5,
        notify=False,
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
        control=True,
        worker_registry=True,
        counters=True,
        fair_shares=True,
        priority_aging=True,
        retention=True,
        dedup=True,
        payload_refs=True,
        discard_succeeded=True,
        reopen=True,
        transactional_enqueue=True,
    )
