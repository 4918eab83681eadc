"""Discarding succeeded tasks: ``complete(..., discard=True)`` (and a ``Completion`` with
``discard``) deletes the task in the step that checks its token, instead of keeping it
SUCCEEDED — for a queue configured ``keep_succeeded = False``."""

from __future__ import annotations

import secrets

import pytest

from rdq.errors import NotFound, StaleClaim
from rdq.spi import (
    PAYLOAD_REF_HEADER,
    AdmitOutcome,
    Completion,
    Dedup,
    Outcome,
    Status,
    Storage,
    TaskFilter,
)
from rdq_compliance._gates import needs
from rdq_compliance._support import (
    LONG_LEASE,
    SHORT_LEASE,
    attempt,
    claim_one,
    dead_tasks,
    list_all_tasks,
    new_id,
    new_task,
    reclaim_after_expiry,
    snapshot,
)

__all__ = ["DiscardClauses"]

_DONE = attempt(1, Outcome.SUCCEEDED)


async def _gone(storage: Storage, task_id: str) -> bool:
    try:
        await storage.get(task_id)
    except NotFound:
        return True
    return False


class DiscardClauses:
    """A completion with ``discard`` deletes its task — with its dedup key and its payload
    reference — atomically with the fencing check: the task is gone from ``get``, every
    listing and every count, and its id is free; a token that is not current raises
    ``StaleClaim`` and deletes nothing, an unknown id ``NotFound``; a task that is not
    claimed (pending or finished) is never deleted; one ``complete_many`` call may mix
    completions that discard and completions that keep."""

    capability = "discard_succeeded"
    since = 5

    @pytest.mark.asyncio
    async def test_complete_with_discard_deletes_the_task_and_frees_its_id(
        self, storage: Storage, queue: str
    ) -> None:
        task = new_task(queue)
        await storage.enqueue(task)
        claimed = await claim_one(storage, queue)
        await storage.complete(task.id, claimed.token, _DONE, discard=True)
        assert await _gone(storage, task.id), "a discarded task is still stored"
        for status in Status if storage.capabilities().task_listing else ():
            listed = await list_all_tasks(storage, queue, TaskFilter(status=status))
            assert task.id not in [t.id for t in listed], f"listed as {status} after its discard"
        assert await storage.enqueue(new_task(queue, task.id)), "a discarded task's id is taken"
        again = await storage.get(task.id)
        assert (again.status, again.attempt_count, again.attempts) == (Status.PENDING, 0, [])

    @pytest.mark.asyncio
    async def test_complete_with_discard_and_a_stale_token_raises_and_deletes_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        first = await claim_one(storage, queue, SHORT_LEASE)
        current = await reclaim_after_expiry(storage, queue)
        task_id = current.task.id
        for token in (first.token, "made-up-" + secrets.token_hex(8)):
            before = snapshot(await storage.get(task_id))
            with pytest.raises(StaleClaim):
                await storage.complete(task_id, token, _DONE, discard=True)
            (result,) = await storage.complete_many([Completion(task_id, token, _DONE, True)])
            assert isinstance(result, StaleClaim), f"complete_many gave {result!r}"
            assert snapshot(await storage.get(task_id)) == before, "a stale discard changed it"
        await storage.complete(task_id, current.token, _DONE, discard=True)
        assert await _gone(storage, task_id)

    @pytest.mark.asyncio
    async def test_complete_with_discard_of_a_task_that_is_gone_raises_not_found(
        self, storage: Storage, queue: str
    ) -> None:
        with pytest.raises(NotFound):
            await storage.complete(new_id(), "some-token", _DONE, discard=True)
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        await storage.complete(claimed.task.id, claimed.token, _DONE, discard=True)
        with pytest.raises(NotFound):  # a second completion of the same claim
            await storage.complete(claimed.task.id, claimed.token, _DONE, discard=True)
        (result,) = await storage.complete_many(
            [Completion(claimed.task.id, claimed.token, _DONE, True)]
        )
        assert isinstance(result, NotFound), f"complete_many gave {result!r}"

    @pytest.mark.asyncio
    async def test_a_task_that_is_not_claimed_is_never_discarded(
        self, storage: Storage, queue: str
    ) -> None:
        (dead,) = await dead_tasks(storage, queue, 1)
        kept = new_task(queue)
        await storage.enqueue(kept)
        done = await claim_one(storage, queue)
        await storage.complete(kept.id, done.token, _DONE)
        pending = new_task(queue)
        await storage.enqueue(pending)
        for task_id, token in ((pending.id, "made-up-token"), (kept.id, done.token)):
            before = snapshot(await storage.get(task_id))
            with pytest.raises(StaleClaim):
                await storage.complete(task_id, token, _DONE, discard=True)
            assert snapshot(await storage.get(task_id)) == before, "a discard changed it"
        dead_before = snapshot(await storage.get(dead))
        results = await storage.complete_many(
            [
                Completion(pending.id, "made-up-token", _DONE, True),
                Completion(dead, "made-up-token", _DONE, True),
            ]
        )
        assert all(isinstance(r, StaleClaim) for r in results), f"gave {results!r}"
        assert (await storage.get(pending.id)).status == Status.PENDING
        assert snapshot(await storage.get(dead)) == dead_before

    @pytest.mark.asyncio
    async def test_complete_many_mixes_completions_that_discard_and_that_keep(
        self, storage: Storage, queue: str
    ) -> None:
        for _ in range(4):
            await storage.enqueue(new_task(queue))
        claims = await storage.claim_due(queue, 4, LONG_LEASE)
        assert len(claims) == 4
        discard = [c.task.id for c in claims[::2]]
        keep = [c.task.id for c in claims[1::2]]
        unknown = new_id()
        results = await storage.complete_many(
            [
                *(Completion(c.task.id, c.token, _DONE, c.task.id in discard) for c in claims),
                Completion(unknown, "some-token", _DONE, True),
            ]
        )
        assert results[:4] == [None] * 4, f"complete_many gave {results!r}"
        assert isinstance(results[4], NotFound), f"an unknown id gave {results[4]!r}"
        for task_id in discard:
            assert await _gone(storage, task_id), "a discarding completion kept its task"
        for task_id in keep:
            task = await storage.get(task_id)
            assert (task.status, task.attempt_count) == (Status.SUCCEEDED, 1), (
                "a keeping completion was not kept SUCCEEDED"
            )

    @pytest.mark.asyncio
    async def test_a_discarded_task_leaves_the_counts(self, storage: Storage, queue: str) -> None:
        for _ in range(3):
            await storage.enqueue(new_task(queue))
        claims = await storage.claim_due(queue, 2, LONG_LEASE)
        kept = claims[1]
        await storage.complete(claims[0].task.id, claims[0].token, _DONE, discard=True)
        await storage.complete_many([Completion(kept.task.id, kept.token, _DONE)])
        stats = await storage.stats(queue)
        counted = (stats.pending, stats.in_flight, stats.succeeded, stats.dlq_depth)
        assert counted == (1, 0, 1, 0), f"stats after one discard and one keep: {stats!r}"
        claimed = await claim_one(storage, queue)
        (result,) = await storage.complete_many(
            [Completion(claimed.task.id, claimed.token, _DONE, True)]
        )
        assert result is None
        stats = await storage.stats(queue)
        counted = (stats.pending, stats.in_flight, stats.succeeded, stats.dlq_depth)
        assert counted == (0, 0, 1, 0), f"stats after a batched discard: {stats!r}"

    @pytest.mark.asyncio
    @needs("dedup")
    async def test_a_discarded_task_frees_its_dedup_key(self, storage: Storage, queue: str) -> None:
        key = "kit-discard-" + secrets.token_hex(8)
        first = new_task(queue)
        await storage.admit(first, Dedup(key=key, window=600.0))
        claimed = await claim_one(storage, queue)
        await storage.complete(first.id, claimed.token, _DONE, discard=True)
        later = new_task(queue)
        freed = await storage.admit(later, Dedup(key=key, window=600.0))
        assert (freed.outcome, freed.task_id) == (AdmitOutcome.ADDED, later.id), (
            "the key of a discarded task is still held"
        )
        again = await storage.admit(new_task(queue), Dedup(key=key, window=600.0))
        assert (again.outcome, again.task_id) == (AdmitOutcome.SKIPPED, later.id)

    @pytest.mark.asyncio
    @needs("payload_refs")
    async def test_a_discarded_task_releases_its_payload_reference(
        self, storage: Storage, queue: str
    ) -> None:
        refs = ["sha256:" + secrets.token_hex(32) for _ in range(2)]
        for ref in refs:
            await storage.enqueue(new_task(queue, headers={PAYLOAD_REF_HEADER: ref}))
        claims = await storage.claim_due(queue, 2, LONG_LEASE)
        by_ref = {c.task.headers[PAYLOAD_REF_HEADER]: c for c in claims}
        one, other = by_ref[refs[0]], by_ref[refs[1]]
        await storage.complete(one.task.id, one.token, _DONE, discard=True)
        await storage.complete_many([Completion(other.task.id, other.token, _DONE, True)])
        assert await storage.held_payload_refs(refs) == set(), "a discarded task holds its ref"
