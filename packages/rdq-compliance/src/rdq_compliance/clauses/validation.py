"""Bad input: every operation raises ``ValidationError`` naming the field, before it touches
anything stored."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from rdq.errors import NotFound, ValidationError
from rdq.spi import (
    Attempt,
    DLQFilter,
    Outcome,
    Page,
    RetryOverride,
    Selector,
    Status,
    Storage,
    TaskFilter,
    bounds,
)
from rdq_compliance._fixtures import require_capability
from rdq_compliance._support import (
    LONG_LEASE,
    attempt,
    claim_one,
    claim_time,
    nested,
    new_id,
    new_task,
    snapshot,
)

__all__ = ["ValidationClauses"]


BAD_TASKS: dict[str, tuple[dict[str, Any], str]] = {
    # case: (fields that break the envelope, the field the error must name)
    "empty-id": ({"id": ""}, "id"),
    "id-with-a-space": ({"id": "has space"}, "id"),
    "id-too-long": ({"id": "x" * (bounds.MAX_ID_LENGTH + 1)}, "id"),
    "empty-queue": ({"queue": ""}, "queue"),
    "queue-starting-with-a-dash": ({"queue": "-queue"}, "queue"),
    "queue-too-long": ({"queue": "q" * (bounds.MAX_QUEUE_LENGTH + 1)}, "queue"),
    "empty-handler-ref": ({"handler_ref": ""}, "handler_ref"),
    "handler-ref-with-whitespace": ({"handler_ref": "mod:fn extra"}, "handler_ref"),
    "payload-too-large": ({"payload": "x" * bounds.MAX_PAYLOAD_BYTES}, "payload"),
    "payload-not-json": ({"payload": {"when": object()}}, "payload"),
    "naive-next-attempt-at": ({"next_attempt_at": datetime(2030, 1, 1)}, "next_attempt_at"),
    "next-attempt-at-past-year-9999-in-utc": (
        {"next_attempt_at": datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))},
        "next_attempt_at",
    ),
    "too-many-headers": (
        {"headers": {f"h{i}": "v" for i in range(bounds.MAX_HEADERS + 1)}},
        "headers",
    ),
    "header-value-too-long": (
        {"headers": {"big": "v" * (bounds.MAX_HEADER_VALUE_LENGTH + 1)}},
        "headers.big",
    ),
    "negative-attempt-count": ({"attempt_count": -1}, "attempt_count"),
    "attempt-count-not-an-integer": ({"attempt_count": "2"}, "attempt_count"),
    "payload-nested-too-deeply": ({"payload": nested(bounds.MAX_DEPTH + 1)}, "payload"),
    # deeper than any JSON encoder or decoder recurses: refused, never a RecursionError
    "payload-nested-beyond-the-recursion-limit": ({"payload": nested(5000)}, "payload"),
    "unknown-field-nested-too-deeply": (
        {"extra": {"newer_field": nested(bounds.MAX_DEPTH + 1)}},
        "newer_field",
    ),
    "retry-max-attempts-not-an-integer": (
        {"retry": RetryOverride(max_attempts="lots")},  # type: ignore[arg-type]
        "retry.max_attempts",
    ),
    "retry-base-not-a-number": (
        {"retry": RetryOverride(base="soon")},  # type: ignore[arg-type]
        "retry.base",
    ),
    "attempt-record-not-an-attempt": ({"attempts": ["failed once"]}, "attempts[0]"),
    "attempt-number-not-an-integer": (
        {"attempts": [Attempt(number="one", outcome=Outcome.FAILED)]},  # type: ignore[arg-type]
        "attempts[0].number",
    ),
}

BAD_CLAIMS: dict[str, tuple[int, Any, str]] = {
    "limit-zero": (0, LONG_LEASE, "limit"),
    "limit-negative": (-1, LONG_LEASE, "limit"),
    "limit-too-large": (bounds.MAX_LIMIT + 1, LONG_LEASE, "limit"),
    "lease-zero": (1, timedelta(0), "lease"),
    "lease-negative": (1, timedelta(seconds=-5), "lease"),
    "lease-too-long": (1, bounds.MAX_LEASE + timedelta(seconds=1), "lease"),
    "lease-not-a-timedelta": (1, 30.0, "lease"),
}

QueueCall = Callable[[Storage, str], Awaitable[object]]


async def _far(storage: Storage, queue: str) -> datetime:
    return (await storage.now()) + timedelta(days=1)


QUEUE_OPERATIONS: dict[str, QueueCall] = {
    "claim_due": lambda s, q: s.claim_due(q, 1, LONG_LEASE),
    "dlq_list": lambda s, q: s.dlq_list(q, None, Page()),
    "redrive": lambda s, q: s.redrive(q, Selector.by_ids("some-id")),
    "purge": lambda s, q: s.purge(q, Selector.by_filter(DLQFilter())),
    "purge_succeeded": lambda s, q: s.purge_succeeded(q, datetime(2000, 1, 1, tzinfo=UTC)),
    "stats": lambda s, q: s.stats(q),
    "cancel": lambda s, q: s.cancel(q, ["some-id"]),
    "list_tasks": lambda s, q: s.list_tasks(q, TaskFilter(status=Status.PENDING), Page()),
    "dlq_groups": lambda s, q: s.dlq_groups(q),
}

NEEDS = {"cancel": "cancel", "list_tasks": "task_listing"}
"""The capability an operation of ``QUEUE_OPERATIONS`` belongs to, where it has one."""

BAD_QUEUE_NAMES = ["", " ", "has space", "-dash-first", "q" * (bounds.MAX_QUEUE_LENGTH + 1)]


def _assert_names(error: ValidationError, field: str) -> None:
    assert error.field == field, f"the ValidationError names {error.field!r}, expected {field!r}"


class ValidationClauses:
    """Bad input raises ``ValidationError`` naming the field and leaves nothing stored."""

    @pytest.mark.asyncio
    @pytest.mark.parametrize("case", sorted(BAD_TASKS))
    async def test_enqueue_with_an_invalid_task_raises_validation_error_and_stores_nothing(
        self, storage: Storage, queue: str, case: str
    ) -> None:
        fields, field = BAD_TASKS[case]
        task = new_task(queue)
        for name, value in fields.items():
            setattr(task, name, value)
        with pytest.raises(ValidationError) as caught:
            await storage.enqueue(task)
        _assert_names(caught.value, field)
        if field != "id":
            with pytest.raises(NotFound):
                await storage.get(task.id)
        if field != "queue":
            assert (await storage.stats(task.queue)).pending == 0
            assert await storage.claim_due(task.queue, 5, LONG_LEASE) == []

    @pytest.mark.asyncio
    async def test_enqueue_with_a_negative_or_too_long_delay_raises_validation_error(
        self, storage: Storage, queue: str
    ) -> None:
        task = new_task(queue)
        for delay in (timedelta(seconds=-1), bounds.MAX_DELAY + timedelta(days=1)):
            with pytest.raises(ValidationError) as caught:
                await storage.enqueue(task, delay=delay)
            _assert_names(caught.value, "delay")
        with pytest.raises(NotFound):
            await storage.get(task.id)

    @pytest.mark.asyncio
    @pytest.mark.parametrize("case", sorted(BAD_CLAIMS))
    async def test_claim_due_with_a_bad_limit_or_lease_raises_validation_error(
        self, storage: Storage, queue: str, case: str
    ) -> None:
        limit, lease, field = BAD_CLAIMS[case]
        await storage.enqueue(new_task(queue))
        with pytest.raises(ValidationError) as caught:
            await storage.claim_due(queue, limit, lease)
        _assert_names(caught.value, field)
        assert len(await storage.claim_due(queue, 1, LONG_LEASE)) == 1, "the task stays due"

    @pytest.mark.asyncio
    @pytest.mark.parametrize("operation", sorted(QUEUE_OPERATIONS))
    async def test_every_queue_operation_rejects_a_bad_queue_name(
        self, storage: Storage, operation: str
    ) -> None:
        if operation in NEEDS:
            require_capability(storage.capabilities(), NEEDS[operation])
        call = QUEUE_OPERATIONS[operation]
        for name in BAD_QUEUE_NAMES:
            with pytest.raises(ValidationError) as caught:
                await call(storage, name)
            _assert_names(caught.value, "queue")

    @pytest.mark.asyncio
    async def test_get_with_a_malformed_id_raises_validation_error(self, storage: Storage) -> None:
        for bad in ("", "has space", "x" * (bounds.MAX_ID_LENGTH + 1)):
            with pytest.raises(ValidationError) as caught:
                await storage.get(bad)
            _assert_names(caught.value, "id")

    @pytest.mark.asyncio
    async def test_extend_lease_with_a_bad_lease_raises_validation_error_and_keeps_the_lease(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        before = snapshot(await storage.get(claimed.task.id))
        for lease in (timedelta(0), timedelta(seconds=-1), bounds.MAX_LEASE * 2):
            with pytest.raises(ValidationError) as caught:
                await storage.extend_lease(claimed.task.id, claimed.token, lease)
            _assert_names(caught.value, "lease")
        assert snapshot(await storage.get(claimed.task.id)) == before
        await storage.extend_lease(claimed.task.id, claimed.token, LONG_LEASE)

    @pytest.mark.asyncio
    async def test_reschedule_with_a_naive_next_at_raises_validation_error_and_keeps_the_claim(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        before = snapshot(await storage.get(claimed.task.id))
        naive = claim_time(claimed, LONG_LEASE).replace(tzinfo=None)
        with pytest.raises(ValidationError) as caught:
            await storage.reschedule(claimed.task.id, claimed.token, attempt(1), naive)
        assert caught.value.field is not None
        assert snapshot(await storage.get(claimed.task.id)) == before
        await storage.complete(claimed.task.id, claimed.token, attempt(1, Outcome.SUCCEEDED))

    @pytest.mark.asyncio
    async def test_an_empty_token_raises_validation_error_and_changes_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        task_id = claimed.task.id
        before = snapshot(await storage.get(task_id))
        far = await _far(storage, queue)
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: storage.extend_lease(task_id, "", LONG_LEASE),
            lambda: storage.reschedule(task_id, "", attempt(1), far),
            lambda: storage.complete(task_id, "", attempt(1, Outcome.SUCCEEDED)),
            lambda: storage.dead_letter(task_id, "", attempt(1, Outcome.PERMANENT)),
        ]
        for call in calls:
            with pytest.raises(ValidationError) as caught:
                await call()
            _assert_names(caught.value, "token")
        assert snapshot(await storage.get(task_id)) == before

    @pytest.mark.asyncio
    async def test_dlq_list_with_a_bad_page_limit_raises_validation_error(
        self, storage: Storage, queue: str
    ) -> None:
        for limit in (0, -1, bounds.MAX_LIMIT + 1):
            with pytest.raises(ValidationError) as caught:
                await storage.dlq_list(queue, None, Page(limit=limit))
            _assert_names(caught.value, "page.limit")

    @pytest.mark.asyncio
    async def test_purge_succeeded_with_a_naive_cutoff_raises_validation_error(
        self, storage: Storage, queue: str
    ) -> None:
        await storage.enqueue(new_task(queue))
        claimed = await claim_one(storage, queue)
        await storage.complete(claimed.task.id, claimed.token, attempt(1, Outcome.SUCCEEDED))
        with pytest.raises(ValidationError) as caught:
            await storage.purge_succeeded(queue, datetime(2999, 1, 1))
        _assert_names(caught.value, "older_than")
        assert (await storage.get(claimed.task.id)).completed_at is not None

    @pytest.mark.asyncio
    async def test_redrive_names_the_malformed_selector_id(
        self, storage: Storage, queue: str
    ) -> None:
        absent = new_id("absent")
        for bad in ("", "has space"):
            with pytest.raises(ValidationError) as caught:
                await storage.redrive(queue, Selector.by_ids(absent, bad))
            assert caught.value.field == "selector.ids[1]"
