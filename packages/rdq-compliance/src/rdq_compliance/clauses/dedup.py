"""Dedup keys: ``admit`` adds a task only while no live task holds its key, folding the others
into the holder as the mode says, atomically — of concurrent admissions of one key exactly one
adds a task."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from rdq.errors import DedupConflict, IDConflict, NotFound, StorageUnavailable, ValidationError
from rdq.spi import (
    AdmitOutcome,
    Admitted,
    Dedup,
    DedupMode,
    Envelope,
    Outcome,
    Selector,
    Status,
    Storage,
)
from rdq_compliance._fixtures import StorageOpener
from rdq_compliance._support import (
    LONG_LEASE,
    attempt,
    claim_one,
    clock_passes,
    new_id,
    new_task,
    snapshot,
)

__all__ = ["DedupClauses"]

SKIP = DedupMode.SKIP


def _key() -> str:
    return new_id("key")


async def _admit_retrying(storage: Storage, task: Envelope, dedup: Dedup) -> Admitted:
    """``admit``, tried again on ``StorageUnavailable`` (a store may refuse a burst beyond its
    connections: retryable, as the contract says, and retried as a client would)."""
    for _ in range(50):
        try:
            return await storage.admit(task, dedup)
        except StorageUnavailable:
            await asyncio.sleep(0.05)
    return await storage.admit(task, dedup)


async def _live(storage: Storage, ids: list[str]) -> list[str]:
    """Those of ``ids`` that are PENDING or IN_FLIGHT."""
    live = []
    for task_id in ids:
        try:
            task = await storage.get(task_id)
        except NotFound:
            continue
        if task.status in (Status.PENDING, Status.IN_FLIGHT):
            live.append(task_id)
    return live


class DedupClauses:
    """``admit(task, dedup)`` admits ``task`` and gives it the key when the key is free, and
    otherwise skips it, restarts the key's window (``extend``), or puts its payload and headers
    into a holder still PENDING (``replace``; ``debounce`` also moves the holder's due time,
    never past its ``max_age``); a key is held for its window, or without one while its task is
    live, and is free once its task is gone; keys are unique across queues
    (``DedupConflict``); ``admit`` is idempotent by id as ``enqueue`` is; concurrent admissions
    of one key leave exactly one live task."""

    capability = "dedup"

    @pytest.mark.asyncio
    async def test_admit_adds_a_task_and_a_second_submission_of_its_key_is_skipped(
        self, storage: Storage, queue: str
    ) -> None:
        key = _key()
        first, second = new_task(queue, payload={"n": 1}), new_task(queue, payload={"n": 2})
        added = await storage.admit(first, Dedup(key=key))
        assert (added.outcome, added.task_id, added.queue) == (AdmitOutcome.ADDED, first.id, queue)
        skipped = await storage.admit(second, Dedup(key=key))
        assert (skipped.outcome, skipped.task_id) == (AdmitOutcome.SKIPPED, first.id)
        with pytest.raises(NotFound):
            await storage.get(second.id)
        stored = await storage.get(first.id)
        assert stored.status == Status.PENDING and stored.payload == {"n": 1}
        assert (await storage.stats(queue)).pending == 1

    @pytest.mark.asyncio
    async def test_a_task_admitted_under_a_key_is_stored_and_claimed_as_enqueue_stores_it(
        self, storage: Storage, queue: str
    ) -> None:
        task = new_task(queue, payload={"deep": [1, {"x": None}]}, headers={"h": "v"})
        await storage.admit(task, Dedup(key=_key()))
        stored = await storage.get(task.id)
        assert (stored.payload, stored.headers, stored.handler_ref) == (
            task.payload,
            task.headers,
            task.handler_ref,
        )
        later = new_task(queue)
        await storage.admit(later, Dedup(key=_key()), delay=timedelta(days=1))
        claimed = await claim_one(storage, queue)
        assert claimed.task.id == task.id, "a delay is honoured as enqueue honours it"

    @pytest.mark.asyncio
    async def test_without_a_window_a_key_is_held_while_its_task_is_live_and_free_after(
        self, storage: Storage, queue: str
    ) -> None:
        key = _key()
        first = new_task(queue)
        await storage.admit(first, Dedup(key=key))
        claimed = await claim_one(storage, queue)
        held = await storage.admit(new_task(queue), Dedup(key=key))
        assert held.outcome == AdmitOutcome.SKIPPED, "an IN_FLIGHT holder still holds it"
        await storage.complete(first.id, claimed.token, attempt(1, Outcome.SUCCEEDED))
        again = new_task(queue)
        freed = await storage.admit(again, Dedup(key=key))
        assert (freed.outcome, freed.task_id) == (AdmitOutcome.ADDED, again.id)

    @pytest.mark.asyncio
    async def test_with_a_window_a_key_is_held_until_it_passes_whatever_its_task_did(
        self, storage: Storage, queue: str
    ) -> None:
        key = _key()
        first = new_task(queue)
        start = await storage.now()
        await storage.admit(first, Dedup(key=key, window=1.0))
        claimed = await claim_one(storage, queue)
        await storage.complete(first.id, claimed.token, attempt(1, Outcome.SUCCEEDED))
        held = await storage.admit(new_task(queue), Dedup(key=key, window=1.0))
        assert (held.outcome, held.task_id) == (AdmitOutcome.SKIPPED, first.id)
        await clock_passes(storage, start + timedelta(seconds=1.2))
        later = new_task(queue)
        freed = await storage.admit(later, Dedup(key=key, window=1.0))
        assert (freed.outcome, freed.task_id) == (AdmitOutcome.ADDED, later.id)

    @pytest.mark.asyncio
    async def test_extend_starts_the_window_again(self, storage: Storage, queue: str) -> None:
        key = _key()
        first = new_task(queue)
        start = await storage.now()
        await storage.admit(first, Dedup(key=key, window=1.0))
        await clock_passes(storage, start + timedelta(seconds=0.7))
        extended = await storage.admit(
            new_task(queue), Dedup(key=key, mode=DedupMode.EXTEND, window=1.0)
        )
        assert (extended.outcome, extended.task_id) == (AdmitOutcome.EXTENDED, first.id)
        await clock_passes(storage, start + timedelta(seconds=1.3))
        held = await storage.admit(new_task(queue), Dedup(key=key, window=1.0))
        assert held.outcome == AdmitOutcome.SKIPPED, "the window began again at the extension"
        await clock_passes(storage, start + timedelta(seconds=2.0))
        freed = await storage.admit(new_task(queue), Dedup(key=key, window=1.0))
        assert freed.outcome == AdmitOutcome.ADDED

    @pytest.mark.asyncio
    async def test_replace_puts_the_payload_and_headers_into_a_pending_holder_and_keeps_its_due(
        self, storage: Storage, queue: str
    ) -> None:
        key = _key()
        first = new_task(queue, payload={"v": 1}, headers={"a": "1"})
        await storage.admit(first, Dedup(key=key), delay=timedelta(hours=1))
        due = (await storage.get(first.id)).next_attempt_at
        second = new_task(queue, payload={"v": 2}, headers={"b": "2"})
        replaced = await storage.admit(second, Dedup(key=key, mode=DedupMode.REPLACE))
        assert (replaced.outcome, replaced.task_id) == (AdmitOutcome.REPLACED, first.id)
        stored = await storage.get(first.id)
        assert (stored.payload, stored.headers) == ({"v": 2}, {"b": "2"})
        assert stored.next_attempt_at == due and stored.status == Status.PENDING
        with pytest.raises(NotFound):
            await storage.get(second.id)

    @pytest.mark.asyncio
    async def test_replace_leaves_a_holder_that_was_claimed_alone(
        self, storage: Storage, queue: str
    ) -> None:
        key = _key()
        first = new_task(queue, payload={"v": 1})
        await storage.admit(first, Dedup(key=key))
        await claim_one(storage, queue)
        before = snapshot(await storage.get(first.id))
        for mode in (DedupMode.REPLACE, DedupMode.DEBOUNCE):
            answer = await storage.admit(
                new_task(queue, payload={"v": 2}), Dedup(key=key, mode=mode, max_age=60.0)
            )
            assert (answer.outcome, answer.task_id) == (AdmitOutcome.SKIPPED, first.id)
        assert snapshot(await storage.get(first.id)) == before

    @pytest.mark.asyncio
    async def test_debounce_moves_the_holders_due_time_but_never_past_its_max_age(
        self, storage: Storage, queue: str
    ) -> None:
        key = _key()
        first = new_task(queue, payload={"v": 1})
        debounce = Dedup(key=key, mode=DedupMode.DEBOUNCE, max_age=3600.0)
        await storage.admit(first, debounce, delay=timedelta(seconds=60))
        created = (await storage.get(first.id)).created_at
        assert created is not None
        answer = await storage.admit(
            new_task(queue, payload={"v": 2}), debounce, delay=timedelta(seconds=600)
        )
        assert (answer.outcome, answer.task_id) == (AdmitOutcome.REPLACED, first.id)
        stored = await storage.get(first.id)
        assert stored.payload == {"v": 2}
        assert stored.next_attempt_at is not None
        assert stored.next_attempt_at >= created + timedelta(seconds=599)
        await storage.admit(new_task(queue, payload={"v": 3}), debounce, delay=timedelta(days=2))
        capped = await storage.get(first.id)
        assert capped.payload == {"v": 3}
        assert capped.next_attempt_at == created + timedelta(seconds=3600), (
            "never due later than max_age after the holder was admitted"
        )

    @pytest.mark.asyncio
    async def test_debounce_past_the_max_age_makes_the_holder_due_now(
        self, storage: Storage, queue: str
    ) -> None:
        key = _key()
        first = new_task(queue)
        debounce = Dedup(key=key, mode=DedupMode.DEBOUNCE, max_age=0.5)
        start = await storage.now()
        await storage.admit(first, debounce, delay=timedelta(seconds=0.2))
        await clock_passes(storage, start + timedelta(seconds=0.8))
        await storage.admit(new_task(queue), debounce, delay=timedelta(hours=1))
        claimed = await claim_one(storage, queue)
        assert claimed.task.id == first.id, "its max_age has passed: due now, not in an hour"

    @pytest.mark.asyncio
    async def test_concurrent_admissions_of_one_key_leave_exactly_one_live_task(
        self, storage: Storage, queue: str
    ) -> None:
        key = _key()
        tasks = [new_task(queue, payload={"i": i}) for i in range(100)]
        answers = await asyncio.gather(
            *(_admit_retrying(storage, t, Dedup(key=key)) for t in tasks)
        )
        added = [a for a in answers if a.outcome == AdmitOutcome.ADDED]
        assert len(added) == 1, f"{len(added)} admissions added a task"
        assert {a.task_id for a in answers} == {added[0].task_id}
        assert await _live(storage, [t.id for t in tasks]) == [added[0].task_id]
        assert (await storage.stats(queue)).pending == 1

    @pytest.mark.asyncio
    async def test_concurrent_admissions_from_two_stores_leave_exactly_one_live_task(
        self, storage: Storage, queue: str, open_peer_storage: StorageOpener
    ) -> None:
        assert storage.capabilities().dedup  # the fixture migrated the schema both peers use
        key = _key()
        tasks = [new_task(queue) for _ in range(40)]
        async with open_peer_storage() as one, open_peer_storage() as two:
            stores = [one, two]
            answers = await asyncio.gather(
                *(_admit_retrying(stores[i % 2], t, Dedup(key=key)) for i, t in enumerate(tasks))
            )
            added = [a for a in answers if a.outcome == AdmitOutcome.ADDED]
            assert len(added) == 1, f"{len(added)} admissions added a task"
            assert await _live(two, [t.id for t in tasks]) == [added[0].task_id]

    @pytest.mark.asyncio
    async def test_a_key_held_in_another_queue_raises_dedup_conflict_and_stores_nothing(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        key = _key()
        first = new_task(queue)
        await storage.admit(first, Dedup(key=key))
        stranger = new_task(other_queue)
        with pytest.raises(DedupConflict) as conflict:
            await storage.admit(stranger, Dedup(key=key))
        assert (conflict.value.key, conflict.value.existing_queue) == (key, queue)
        assert conflict.value.task_id == first.id
        assert isinstance(conflict.value, IDConflict), "keys are unique across queues, as ids"
        with pytest.raises(NotFound):
            await storage.get(stranger.id)

    @pytest.mark.asyncio
    async def test_a_key_freed_in_one_queue_may_be_taken_in_another(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        key = _key()
        first = new_task(queue)
        await storage.admit(first, Dedup(key=key))
        assert await storage.cancel(queue, [first.id]) == 1
        elsewhere = new_task(other_queue)
        answer = await storage.admit(elsewhere, Dedup(key=key))
        assert (answer.outcome, answer.queue) == (AdmitOutcome.ADDED, other_queue)

    @pytest.mark.asyncio
    async def test_admit_is_idempotent_by_id_before_anything_else(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        task = new_task(queue)
        await storage.enqueue(task)
        answer = await storage.admit(task, Dedup(key=_key()))
        assert (answer.outcome, answer.task_id) == (AdmitOutcome.SKIPPED, task.id)
        fresh = await storage.admit(new_task(queue), Dedup(key=answer.task_id + "-k"))
        assert fresh.outcome == AdmitOutcome.ADDED, "the skipped id took no key"
        with pytest.raises(IDConflict):
            await storage.admit(new_task(other_queue, task.id), Dedup(key=_key()))

    @pytest.mark.asyncio
    async def test_a_key_whose_task_was_purged_or_expired_is_free(
        self, storage: Storage, queue: str
    ) -> None:
        key = _key()
        first = new_task(queue)
        await storage.admit(first, Dedup(key=key, window=3600.0))
        claimed = await claim_one(storage, queue, LONG_LEASE)
        await storage.dead_letter(first.id, claimed.token, attempt(1, Outcome.PERMANENT))
        assert (await storage.admit(new_task(queue), Dedup(key=key))).outcome == "skipped"
        assert await storage.purge(queue, Selector.by_ids(first.id)) == 1
        again = new_task(queue)
        answer = await storage.admit(again, Dedup(key=key))
        assert (answer.outcome, answer.task_id) == (AdmitOutcome.ADDED, again.id)

    @pytest.mark.asyncio
    async def test_admit_with_a_bad_dedup_raises_validation_error_and_stores_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        bad = {
            "dedup.key": Dedup(key="has space"),
            "dedup.window": Dedup(key=_key(), mode=DedupMode.EXTEND),
            "dedup.max_age": Dedup(key=_key(), mode=DedupMode.DEBOUNCE),
        }
        for field, dedup in bad.items():
            task = new_task(queue)
            with pytest.raises(ValidationError) as info:
                await storage.admit(task, dedup)
            assert info.value.field == field
            with pytest.raises(NotFound):
                await storage.get(task.id)
        with pytest.raises(ValidationError):
            await storage.admit(new_task(queue), Dedup(key=_key(), window=-1.0))
