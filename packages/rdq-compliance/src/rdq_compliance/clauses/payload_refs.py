"""Payload references: ``held_payload_refs`` says which references some stored task carries —
the engine deletes a payload's blob only when none does, so a reference held and not said
would leave a task whose payload is gone."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from rdq.errors import ValidationError
from rdq.spi import PAYLOAD_REF_HEADER, Dedup, DedupMode, Envelope, Outcome, Selector, Storage
from rdq_compliance._gates import needs
from rdq_compliance._support import attempt, claim_one, new_task

__all__ = ["PayloadRefClauses"]


def _ref() -> str:
    return "sha256:" + secrets.token_hex(32)


def _carrying(queue: str, ref: str, **fields: Any) -> Envelope:
    return new_task(queue, headers={PAYLOAD_REF_HEADER: ref, "other": "x"}, **fields)


class PayloadRefClauses:
    """``held_payload_refs`` answers, of the references asked about, those that a stored task
    carries in its ``rdq-payload-ref`` header — in any status and any queue, admitted,
    imported or written by a replacement — and none once every task carrying it is deleted
    (purged, expired, past the finished-task TTL) or its headers replaced."""

    capability = "payload_refs"

    @pytest.mark.asyncio
    async def test_a_reference_is_held_by_a_task_in_every_status_and_queue(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        pending, leased, done, dead, elsewhere = (_ref() for _ in range(5))
        await storage.enqueue(_carrying(queue, pending, priority=0))
        for ref in (leased, done, dead):
            await storage.enqueue(_carrying(queue, ref))
        await storage.enqueue(_carrying(other_queue, elsewhere))
        claims = {}
        for _ in range(4):
            claimed = await claim_one(storage, queue)
            claims[claimed.task.headers[PAYLOAD_REF_HEADER]] = claimed
        await storage.complete(
            claims[done].task.id, claims[done].token, attempt(1, Outcome.SUCCEEDED)
        )
        await storage.dead_letter(
            claims[dead].task.id, claims[dead].token, attempt(1, Outcome.PERMANENT)
        )
        await storage.reschedule(
            claims[pending].task.id,
            claims[pending].token,
            attempt(1),
            await storage.now() + timedelta(hours=1),
        )
        asked = [pending, leased, done, dead, elsewhere]
        assert await storage.held_payload_refs(asked) == set(asked)

    @pytest.mark.asyncio
    async def test_a_reference_no_task_carries_is_not_held(
        self, storage: Storage, queue: str
    ) -> None:
        carried = _ref()
        await storage.enqueue(_carrying(queue, carried))
        await storage.enqueue(new_task(queue, headers={"x-ref": _ref()}))
        stranger = _ref()
        assert await storage.held_payload_refs([stranger, carried]) == {carried}
        assert await storage.held_payload_refs([stranger]) == set()

    @pytest.mark.asyncio
    async def test_a_reference_is_released_once_every_task_carrying_it_is_deleted(
        self, storage: Storage, queue: str
    ) -> None:
        shared = _ref()
        first, second = _carrying(queue, shared), _carrying(queue, shared)
        await storage.enqueue(first)
        await storage.enqueue(second)
        one = await claim_one(storage, queue)
        await storage.dead_letter(one.task.id, one.token, attempt(1, Outcome.PERMANENT))
        assert await storage.purge(queue, Selector.by_ids(one.task.id)) == 1
        assert await storage.held_payload_refs([shared]) == {shared}, "the other still holds it"
        two = await claim_one(storage, queue)
        await storage.complete(two.task.id, two.token, attempt(1, Outcome.SUCCEEDED))
        cutoff = await storage.now() + timedelta(seconds=1)
        assert await storage.purge_succeeded(queue, cutoff) == 1
        assert await storage.held_payload_refs([shared]) == set()

    @needs("retention")
    @pytest.mark.asyncio
    async def test_a_reference_is_released_when_retention_expires_its_task(
        self, storage: Storage, queue: str
    ) -> None:
        ref = _ref()
        await storage.enqueue(_carrying(queue, ref))
        claimed = await claim_one(storage, queue)
        await storage.dead_letter(claimed.task.id, claimed.token, attempt(1, Outcome.PERMANENT))
        cutoff = await storage.now() + timedelta(microseconds=1)
        assert await storage.expire_tasks(queue, [claimed.task.id], cutoff) == 1
        assert await storage.held_payload_refs([ref]) == set()

    @needs("import_tasks")
    @pytest.mark.asyncio
    async def test_an_imported_task_holds_its_reference(self, storage: Storage, queue: str) -> None:
        ref = _ref()
        await storage.enqueue(_carrying(queue, ref))
        claimed = await claim_one(storage, queue)
        await storage.dead_letter(claimed.task.id, claimed.token, attempt(1, Outcome.PERMANENT))
        archived = await storage.get(claimed.task.id)
        assert await storage.purge(queue, Selector.by_ids(archived.id)) == 1
        assert await storage.held_payload_refs([ref]) == set()
        assert await storage.import_tasks([archived]) == [True]
        assert await storage.held_payload_refs([ref]) == {ref}
        # and a task this store never admitted (exported from another store)
        other = _ref()
        foreign = msgspec.structs.replace(
            archived,
            id=f"{archived.id}-from-elsewhere",
            headers={**archived.headers, PAYLOAD_REF_HEADER: other},
        )
        assert await storage.import_tasks([foreign]) == [True]
        assert await storage.held_payload_refs([ref, other]) == {ref, other}

    @needs("dedup")
    @pytest.mark.asyncio
    async def test_a_replacement_moves_the_holders_reference(
        self, storage: Storage, queue: str
    ) -> None:
        old, new = _ref(), _ref()
        key = f"key-{secrets.token_hex(6)}"
        first = _carrying(queue, old)
        await storage.admit(first, Dedup(key=key))
        answer = await storage.admit(_carrying(queue, new), Dedup(key=key, mode=DedupMode.REPLACE))
        assert answer.task_id == first.id
        assert await storage.held_payload_refs([old, new]) == {new}

    @pytest.mark.asyncio
    async def test_held_payload_refs_with_bad_input_raises_validation_error(
        self, storage: Storage
    ) -> None:
        with pytest.raises(ValidationError) as lone:
            await storage.held_payload_refs(_ref())
        assert lone.value.field == "refs"
        with pytest.raises(ValidationError) as spaced:
            await storage.held_payload_refs([_ref(), "sha256 with space"])
        assert spaced.value.field == "refs[1]"
        with pytest.raises(ValidationError):
            await storage.held_payload_refs([_ref() for _ in range(1001)])
        assert await storage.held_payload_refs([]) == set()
