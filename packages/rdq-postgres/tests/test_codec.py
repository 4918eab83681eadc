"""Rows of the task table back to envelopes: the direct path for common rows gives exactly
what the general path gives, and rows it cannot take fall back to the general path."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from rdq.spi import Envelope, Status
from rdq_postgres._codec import (
    _envelope_from_builtins_row,
    _envelope_from_typed_row,
    envelope_from_row,
)

AT = datetime(2026, 11, 30, 3, 0, 0, 123456, tzinfo=UTC)
ATTEMPT = (
    '{"number":1,"outcome":"FAILED","error_type":"KeyError","error_message":"x",'
    '"started_at":"2026-11-30T03:00:00.123456Z","finished_at":"2026-11-30T03:00:01Z",'
    '"worker_id":"w:1"}'
)


def row(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "t-1",
        "queue": "q",
        "handler_ref": "app.tasks:send",
        "payload": '{"to":"a@example.com","n":[1,2.5,null]}',
        "headers": '{"trace":"abc"}',
        "status": "IN_FLIGHT",
        "attempt_count": 1,
        "redrive_count": 2,
        "attempts": f"[{ATTEMPT}]",
        "created_at": AT,
        "next_attempt_at": AT,
        "lease_expires_at": AT,
        "completed_at": None,
        "dead_lettered_at": None,
        "retry": '{"max_attempts":3}',
        "priority": 3,
        "keys": ["dep:psp", "tenant:ä-1"],
        "claimed_by": "w:1",
        "claimed_at": AT,
        "cancelled_at": None,
        "format_version": 1,
        "extra": "{}",
        "quarantine": None,
    }
    return base | overrides


COMMON_ROWS = [
    row(),
    row(attempts="[]", attempt_count=0, retry=None, headers="{}", status="PENDING"),
    row(payload="null", extra=None, keys=[]),
    row(status="SUCCEEDED", completed_at=AT, lease_expires_at=None),
    row(status="CANCELLED", cancelled_at=AT, claimed_by=None, claimed_at=None, priority=-10),
]


@pytest.mark.parametrize("given", COMMON_ROWS)
def test_the_direct_path_equals_the_general_one(given: dict[str, Any]) -> None:
    direct = _envelope_from_typed_row(given)  # type: ignore[arg-type]
    general = _envelope_from_builtins_row(given)  # type: ignore[arg-type]
    assert direct == general
    assert isinstance(direct.status, Status)
    assert envelope_from_row(given) == general  # type: ignore[arg-type]


def test_unknown_fields_take_the_general_path_and_are_kept() -> None:
    task = envelope_from_row(row(extra='{"deadline":5}'))  # type: ignore[arg-type]
    assert task.extra == {"deadline": 5}


def test_a_lenient_value_falls_back_and_converts_as_before() -> None:
    # an attempt number written as text by a foreign worker: the general path converts it
    text_number = ATTEMPT.replace('"number":1', '"number":"1"')
    given = row(attempts=f"[{text_number}]")
    task: Envelope = envelope_from_row(given)  # type: ignore[arg-type]
    assert task.attempts[0].number == 1


def test_an_undecodable_value_comes_back_corrupt_naming_its_column_and_raw_value() -> None:
    raw = '[{"number":"one"}]'
    task = envelope_from_row(row(attempts=raw))  # type: ignore[arg-type]
    assert task.corrupt is not None
    assert "column attempts" in task.corrupt and raw in task.corrupt
    assert (task.id, task.queue, task.status, task.priority) == ("t-1", "q", "IN_FLIGHT", 3)
    assert task.attempts == [] and task.headers == {"trace": "abc"}  # what decoded is kept
