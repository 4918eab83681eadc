"""Submitting under a dedup key through the client: outcomes, the audit entry, a hundred
concurrent submissions of one key, the settings' checks, and the fallback of a store
without the ``dedup`` capability."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

import rdq
from rdq.spi import AuditFilter, Capabilities, Page, Status, Storage
from rdq_memory import MemoryStorage

from .conftest import BACKENDS, fast_worker, running, wait_status


def _app(queue: str) -> rdq.App:
    app = rdq.App()
    app.queue(queue)

    @app.handler("sync_order", queue=queue)
    async def sync_order(payload: Any) -> None:
        return None

    return app


@pytest.mark.asyncio
async def test_a_second_submission_of_a_key_is_skipped_and_audited(
    storage: Storage, queue: str
) -> None:
    client = rdq.Client(storage, _app(queue), actor="checkout")
    first = await client.submit("sync_order", {"v": 1}, dedup_key="order-1", delay=60)
    assert (first.outcome, first.created) == ("added", True)
    again = await client.submit("sync_order", {"v": 2}, dedup_key="order-1")
    assert (again.outcome, again.id, again.created) == ("skipped", first.id, False)
    assert (await storage.get(first.id)).payload == {"v": 1}
    if storage.capabilities().audit:
        entries, _ = await storage.list_audit(AuditFilter(action="dedup", queue=queue), Page())
        [entry] = entries
        assert entry.actor == "checkout" and entry.selector["outcome"] == "skipped"
        assert entry.selector["task"] == first.id and entry.selector["key"] == "order-1"


@pytest.mark.asyncio
async def test_replace_and_debounce_fold_new_data_into_the_waiting_task(
    storage: Storage, queue: str
) -> None:
    client = rdq.Client(storage, _app(queue))
    first = await client.submit("sync_order", {"v": 1}, dedup_key="k", delay=3600)
    replaced = await client.submit("sync_order", {"v": 2}, dedup_key="k", dedup_mode="replace")
    assert (replaced.outcome, replaced.id) == ("replaced", first.id)
    debounced = await client.submit(
        "sync_order", {"v": 3}, dedup_key="k", dedup_mode="debounce", delay=0.2
    )
    assert (debounced.outcome, debounced.id) == ("replaced", first.id)
    stored = await storage.get(first.id)
    assert stored.payload == {"v": 3}
    worker = fast_worker(client.app, storage)  # type: ignore[arg-type]
    async with running(worker):
        await wait_status(storage, first.id, Status.SUCCEEDED)
    fresh = await client.submit("sync_order", {"v": 4}, dedup_key="k")
    assert fresh.outcome == "added" and fresh.id != first.id, "the key is free once it ran"


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", sorted({*BACKENDS, "sqlite", "postgres"}))  # SQLite always
async def test_a_hundred_concurrent_submissions_of_one_key_leave_one_live_task(
    storage: Storage, queue: str
) -> None:
    client = rdq.Client(storage, _app(queue))

    async def submit(i: int) -> rdq.Submitted:
        for _ in range(50):  # a burst beyond a store's connections is retried, as callers do
            try:
                return await client.submit("sync_order", {"i": i}, dedup_key="burst")
            except rdq.StorageUnavailable:
                await asyncio.sleep(0.05)
        return await client.submit("sync_order", {"i": i}, dedup_key="burst")

    answers = await asyncio.gather(*(submit(i) for i in range(100)))
    added = [a for a in answers if a.outcome == "added"]
    assert len(added) == 1
    assert {a.id for a in answers} == {added[0].id}
    assert (await storage.stats(queue)).pending == 1


@pytest.mark.asyncio
async def test_a_key_held_in_another_queue_is_refused(storage: Storage, queue: str) -> None:
    client = rdq.Client(storage)
    await client.submit("h", dedup_key="shared", queue=queue)
    with pytest.raises(rdq.DedupConflict) as conflict:
        await client.submit("h", dedup_key="shared", queue=queue + "-other")
    assert conflict.value.existing_queue == queue
    assert isinstance(conflict.value, rdq.IDConflict)


@pytest.mark.asyncio
async def test_bad_dedup_settings_are_refused_naming_the_argument() -> None:
    async with MemoryStorage() as storage:
        client = rdq.Client(storage)
        cases: dict[str, dict[str, Any]] = {
            "dedup_key": {"dedup_key": "has space"},
            "dedup_mode": {"dedup_key": "k", "dedup_mode": "sometimes"},
            "dedup_window": {"dedup_key": "k", "dedup_mode": "extend"},
        }
        for field, arguments in cases.items():
            with pytest.raises(rdq.ValidationError) as bad:
                await client.submit("h", **arguments)
            assert bad.value.field == field
        with pytest.raises(rdq.ValidationError) as orphan:
            await client.submit("h", dedup_window=5)
        assert orphan.value.field == "dedup_key"
        assert (await storage.stats("default")).pending == 0


class _WithoutDedup(MemoryStorage):
    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(super().capabilities(), dedup=False)


@pytest.mark.asyncio
async def test_without_the_capability_skip_works_by_a_derived_id_and_the_rest_is_refused() -> None:
    async with _WithoutDedup() as storage:
        client = rdq.Client(storage)
        first = await client.submit("h", {"v": 1}, dedup_key="order-9")
        assert first.outcome == "added" and first.id.startswith("dedup-")
        again = await client.submit("h", {"v": 2}, dedup_key="order-9")
        assert (again.outcome, again.id) == ("skipped", first.id)
        windowed = await client.submit("h", dedup_key="order-9", dedup_window=3600)
        assert windowed.outcome == "added" and windowed.id != first.id, "its own period's id"
        with pytest.raises(rdq.errors.Unsupported):
            await client.submit("h", dedup_key="order-9", dedup_mode="replace")
        with pytest.raises(rdq.ValidationError) as named:
            await client.submit("h", id="mine", dedup_key="order-10")
        assert named.value.field == "id"
