"""Lossless round-trip: what is enqueued comes back unchanged, unknown fields included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from rdq.keys import Keyring, open_payload, seal
from rdq.spi import Attempt, Envelope, Outcome, RetryOverride, Selector, Storage
from rdq_compliance._support import (
    LONG_LEASE,
    attempt,
    claim_one,
    claim_time,
    list_whole_dlq,
    new_task,
    snapshot,
)

__all__ = ["RoundTripClauses"]

#: Fields a newer producer might write; this release keeps them in ``Envelope.extra``.
UNKNOWN_FIELDS: dict[str, Any] = {
    "x_trace": {"span": "7f3a", "sampled": True, "path": ["a", "b", {"c": None}]},
    "x_priority": 7,
    "x_note": "ünïcødé ✓ 🚀",
}

PAYLOADS: dict[str, Any] = {
    "null": None,
    "true": True,
    "zero": 0,
    "big-int": 2**53 + 1,
    "negative": -12345678901,
    "float": 0.1,
    "tiny-float": 5e-324,
    "huge-float": 1.7976931348623157e308,
    "empty-string": "",
    "unicode": "Grüße, 世界! ¿Qué tal? — 🙂 \u2028 \U0001f600",
    "escapes": 'quote " backslash \\ tab \t newline \n',
    "empty-list": [],
    "empty-object": {},
    "nested": {"a": [1, [2, [3, {"b": {"c": [None, False, 1.5, "d"]}}]]], "e": {"f": {}}},
    "unicode-keys": {"ключ": "значение", "🔑": ["🚪"], "": "empty key"},
    "list-of-mixed": [1, "two", 3.0, None, True, {"six": 6}, [7]],
}


def _rich_task(queue: str) -> Envelope:
    return new_task(
        queue,
        handler_ref="kit.handlers:händler",
        payload={"order": 42, "items": [{"sku": "Ä-1", "qty": 2}], "note": "✓"},
        headers={"traceparent": "00-abc-def-01", "x-tënant": "αβγ", "empty": ""},
        retry=RetryOverride(max_attempts=3, backoff="fixed", base=1.5, cap=60.0, timeout=9.0),
        redrive_count=0,
        priority=3,
        extra=dict(UNKNOWN_FIELDS),
    )


def _given(task: Envelope) -> dict[str, Any]:
    """What the caller controls of ``task`` (the store owns status, timestamps and lease)."""
    owned = {
        "status",
        "created_at",
        "next_attempt_at",
        "lease_expires_at",
        "completed_at",
        "dead_lettered_at",
        "claimed_by",
        "claimed_at",
        "cancelled_at",
        "attempts",
        "attempt_count",
    }
    return {k: v for k, v in snapshot(task).items() if k not in owned}


SEALED_SIZES = (0, 1, 1000, 60_000)
"""Bytes of payload the sealed-payload clause seals: empty to well past 64 KiB of base64."""


class RoundTripClauses:
    """Every field the caller gives, unknown fields in ``Envelope.extra`` included, comes back
    unchanged from ``get``, ``claim_due`` and ``dlq_list``; a payload the engine sealed comes
    back byte for byte (the store never looks into a payload)."""

    @pytest.mark.asyncio
    async def test_round_trip_keeps_sealed_payloads_opaque(
        self, storage: Storage, queue: str
    ) -> None:
        """A payload sealed by the engine (``rdq.keys``: a base64 string of ciphertext, and
        the header naming its key) comes back byte for byte from ``get``, ``claim_due`` and
        ``dlq_list``, through a dead-letter and a redrive, and still opens: a store keeps a
        payload it cannot read, never normalises, cuts or interprets it."""
        keys = Keyring({"kit": bytes(range(32))}, "kit")
        given = {
            size: seal(new_task(queue, payload={"blob": "x" * size, "card": "4111"}), keys)
            for size in SEALED_SIZES
        }
        for task in given.values():
            await storage.enqueue(task)
        by_id = {task.id: task for task in given.values()}

        def same(got: Envelope, where: str) -> None:
            sent = by_id[got.id]
            assert got.payload == sent.payload, f"{where} changed a sealed payload"
            assert type(got.payload) is str, f"{where} handed back a sealed payload as no string"
            assert got.headers == sent.headers, f"{where} changed the headers of a sealed task"
            assert open_payload(got, keys) == open_payload(sent, keys)

        for task in given.values():
            same(await storage.get(task.id), "get")
        claimed = await storage.claim_due(queue, len(given), LONG_LEASE)
        assert len(claimed) == len(given)
        for one in claimed:
            same(one.task, "claim_due")
            await storage.dead_letter(one.task.id, one.token, attempt(1, Outcome.PERMANENT))
        listed = await list_whole_dlq(storage, queue)
        assert len(listed) == len(given)
        for task in listed:
            same(task, "dlq_list")
        assert await storage.redrive(queue, Selector.by_ids(*by_id)) == len(given)
        for task in given.values():
            same(await storage.get(task.id), "get after a redrive")

    @pytest.mark.asyncio
    async def test_round_trip_keeps_every_envelope_field(
        self, storage: Storage, queue: str
    ) -> None:
        task = _rich_task(queue)
        task.extra = {}
        await storage.enqueue(task)
        assert _given(await storage.get(task.id)) == _given(task)

    @pytest.mark.asyncio
    async def test_round_trip_keeps_unknown_fields(self, storage: Storage, queue: str) -> None:
        task = _rich_task(queue)
        await storage.enqueue(task)
        stored = await storage.get(task.id)
        assert stored.extra == UNKNOWN_FIELDS
        assert _given(stored) == _given(task)

    @pytest.mark.asyncio
    async def test_round_trip_keeps_unknown_fields_through_claim_and_resolution(
        self, storage: Storage, queue: str
    ) -> None:
        task = _rich_task(queue)
        await storage.enqueue(task)
        claimed = await claim_one(storage, queue)
        assert claimed.task.extra == UNKNOWN_FIELDS, "claim_due hands out unknown fields"
        due_again = claim_time(claimed, LONG_LEASE) - timedelta(seconds=1)
        await storage.reschedule(task.id, claimed.token, attempt(1), due_again)
        assert (await storage.get(task.id)).extra == UNKNOWN_FIELDS
        again = await claim_one(storage, queue)
        await storage.dead_letter(task.id, again.token, attempt(2, Outcome.PERMANENT))
        (listed,) = await list_whole_dlq(storage, queue)
        assert listed.extra == UNKNOWN_FIELDS, "dlq_list hands out unknown fields"
        assert (await storage.redrive(queue, Selector.by_ids(task.id))) == 1
        stored = await storage.get(task.id)
        assert stored.extra == UNKNOWN_FIELDS
        assert _given(stored) | {"redrive_count": 0} == _given(task)

    @pytest.mark.asyncio
    @pytest.mark.parametrize("kind", sorted(PAYLOADS))
    async def test_round_trip_keeps_unicode_and_nested_payloads(
        self, storage: Storage, queue: str, kind: str
    ) -> None:
        task = new_task(queue, payload=PAYLOADS[kind])
        await storage.enqueue(task)
        stored = await storage.get(task.id)
        assert stored.payload == PAYLOADS[kind]
        assert type(stored.payload) is type(PAYLOADS[kind])
        claimed = await claim_one(storage, queue)
        assert claimed.task.payload == PAYLOADS[kind]

    @pytest.mark.asyncio
    async def test_round_trip_keeps_nul_characters_in_strings(
        self, storage: Storage, queue: str
    ) -> None:
        payload = {"nul": "before\u0000after", "key\u0000": ["\u0000"]}
        task = new_task(queue, payload=payload, headers={"h": "a\u0000b"})
        await storage.enqueue(task)
        stored = await storage.get(task.id)
        assert stored.payload == payload
        assert stored.headers == {"h": "a\u0000b"}

    @pytest.mark.asyncio
    async def test_round_trip_keeps_object_keys_with_dots_and_dollars(
        self, storage: Storage, queue: str
    ) -> None:
        payload = {"$set": {"a.b": 1}, "$": [{"$in": [1, 2]}], ".": ".", "_id": "not-mine"}
        task = new_task(queue, payload=payload, extra={"x.dotted": {"$dollar": 1}})
        await storage.enqueue(task)
        stored = await storage.get(task.id)
        assert stored.payload == payload
        assert stored.extra == {"x.dotted": {"$dollar": 1}}

    @pytest.mark.asyncio
    async def test_round_trip_keeps_attempt_records_exactly(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        start = claim_time(claimed, LONG_LEASE)
        record = Attempt(
            number=1,
            outcome=Outcome.TIMEOUT,
            error_type="asyncio.TimeoutError",
            error_message="took too long: 🐢\nline two",
            started_at=start + timedelta(microseconds=1),
            finished_at=start + timedelta(seconds=3, microseconds=999_999),
            worker_id="host-1:pid-42:✓",
        )
        await storage.reschedule(claimed.task.id, claimed.token, record, start + timedelta(days=1))
        assert (await storage.get(claimed.task.id)).attempts == [record]

    @pytest.mark.asyncio
    async def test_round_trip_keeps_every_outcome_the_contract_names(
        self, storage: Storage, queue: str
    ) -> None:
        """Each outcome an attempt can record (``Outcome.SNOOZED``, the newest, included) is
        read back as written: a store that keeps a list of the outcomes it knows would turn a
        newer engine's attempts into corrupt tasks."""
        await storage.enqueue(new_task(queue))
        written = []
        for number, outcome in enumerate(Outcome, start=1):
            claimed = await claim_one(storage, queue)
            start = claim_time(claimed, LONG_LEASE)
            record = Attempt(number=number, outcome=outcome, error_type=f"rdq.{outcome.value}")
            record = msgspec.structs.replace(record, finished_at=start)
            await storage.reschedule(claimed.task.id, claimed.token, record, start)
            written.append(record)
        stored = await storage.get(claimed.task.id)
        assert [a.outcome for a in stored.attempts] == list(Outcome)
        assert stored.attempts == written

    @pytest.mark.asyncio
    async def test_round_trip_keeps_microsecond_timestamps(
        self, storage: Storage, queue: str
    ) -> None:
        due = datetime(2031, 7, 8, 9, 10, 11, 123_457, tzinfo=UTC)
        task = new_task(queue, next_attempt_at=due)
        await storage.enqueue(task)
        stored = await storage.get(task.id)
        assert stored.next_attempt_at == due
        assert stored.next_attempt_at.utcoffset() == timedelta(0)
        assert stored.created_at is not None
        assert stored.created_at.utcoffset() == timedelta(0), "timestamps are aware UTC"
