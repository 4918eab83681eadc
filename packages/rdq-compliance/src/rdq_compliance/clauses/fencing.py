"""Fencing: a mutation bearing a token that is not the current one raises ``StaleClaim``
and changes nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from rdq.errors import StaleClaim
from rdq.spi import Claimed, Outcome, Status, Storage
from rdq_compliance._support import (
    LONG_LEASE,
    SHORT_LEASE,
    attempt,
    claim_one,
    claim_time,
    new_task,
    reclaim_after_expiry,
    snapshot,
)

__all__ = ["FencingClauses"]

Mutation = Callable[[Storage, str, str], Awaitable[object]]


async def _lost_lease(storage: Storage, queue: str) -> tuple[str, Claimed]:
    """A task whose first lease lapsed and was reclaimed: (the stale token, the current claim)."""
    await storage.enqueue(new_task(queue))
    first = await claim_one(storage, queue, SHORT_LEASE)
    current = await reclaim_after_expiry(storage, queue)
    assert current.task.id == first.task.id
    assert current.token != first.token, "a reclaim must mint a new token"
    return first.token, current


async def _assert_fenced(
    storage: Storage, task_id: str, token: str, mutation: Mutation, what: str
) -> None:
    before = snapshot(await storage.get(task_id))
    with pytest.raises(StaleClaim) as caught:
        await mutation(storage, task_id, token)
    assert caught.value.task_id == task_id, "StaleClaim names the task"
    after = snapshot(await storage.get(task_id))
    assert after == before, f"{what} with a stale token changed the task"


async def _extend(storage: Storage, task_id: str, token: str) -> object:
    return await storage.extend_lease(task_id, token, LONG_LEASE)


async def _reschedule(storage: Storage, task_id: str, token: str) -> object:
    task = await storage.get(task_id)
    assert task.created_at is not None
    await storage.reschedule(
        task_id, token, attempt(task.attempt_count + 1), task.created_at + timedelta(hours=1)
    )
    return None


async def _complete(storage: Storage, task_id: str, token: str) -> object:
    task = await storage.get(task_id)
    await storage.complete(task_id, token, attempt(task.attempt_count + 1, Outcome.SUCCEEDED))
    return None


async def _dead_letter(storage: Storage, task_id: str, token: str) -> object:
    task = await storage.get(task_id)
    await storage.dead_letter(task_id, token, attempt(task.attempt_count + 1, Outcome.PERMANENT))
    return None


class FencingClauses:
    """``extend_lease``, ``reschedule``, ``complete`` and ``dead_letter`` with a token that is
    not the current one raise ``StaleClaim`` and change nothing."""

    @pytest.mark.asyncio
    async def test_fencing_stale_token_on_extend_lease_changes_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        stale, current = await _lost_lease(storage, queue)
        await _assert_fenced(storage, current.task.id, stale, _extend, "extend_lease")
        await storage.extend_lease(current.task.id, current.token, LONG_LEASE)

    @pytest.mark.asyncio
    async def test_fencing_stale_token_on_reschedule_changes_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        stale, current = await _lost_lease(storage, queue)
        await _assert_fenced(storage, current.task.id, stale, _reschedule, "reschedule")
        await _reschedule(storage, current.task.id, current.token)

    @pytest.mark.asyncio
    async def test_fencing_stale_token_on_complete_changes_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        stale, current = await _lost_lease(storage, queue)
        await _assert_fenced(storage, current.task.id, stale, _complete, "complete")
        await _complete(storage, current.task.id, current.token)

    @pytest.mark.asyncio
    async def test_fencing_stale_token_on_dead_letter_changes_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        stale, current = await _lost_lease(storage, queue)
        await _assert_fenced(storage, current.task.id, stale, _dead_letter, "dead_letter")
        await _dead_letter(storage, current.task.id, current.token)

    @pytest.mark.asyncio
    async def test_fencing_made_up_token_is_stale_on_every_mutation(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        task_id = claimed.task.id
        for mutation, what in (
            (_extend, "extend_lease"),
            (_reschedule, "reschedule"),
            (_complete, "complete"),
            (_dead_letter, "dead_letter"),
        ):
            await _assert_fenced(storage, task_id, "not-the-token", mutation, what)
        await _complete(storage, task_id, claimed.token)

    @pytest.mark.asyncio
    async def test_fencing_token_of_a_resolved_task_is_stale(
        self, storage: Storage, queue: str
    ) -> None:
        for resolve in (_complete, _dead_letter, _reschedule):
            await storage.enqueue(new_task(queue))
            claimed = await claim_one(storage, queue)
            await resolve(storage, claimed.task.id, claimed.token)
            for mutation, what in (
                (_extend, "extend_lease"),
                (_reschedule, "reschedule"),
                (_complete, "complete"),
                (_dead_letter, "dead_letter"),
            ):
                await _assert_fenced(storage, claimed.task.id, claimed.token, mutation, what)

    @pytest.mark.asyncio
    async def test_fencing_token_of_an_earlier_claim_is_stale_after_a_reschedule(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        first = await claim_one(storage, queue)
        due_again = claim_time(first, LONG_LEASE) - timedelta(seconds=1)
        await storage.reschedule(first.task.id, first.token, attempt(1), due_again)
        second = await claim_one(storage, queue)
        assert second.task.id == first.task.id
        assert second.task.status == Status.IN_FLIGHT
        await _assert_fenced(storage, first.task.id, first.token, _complete, "complete")
        await _complete(storage, second.task.id, second.token)
