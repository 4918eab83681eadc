"""The documented input limits every backend enforces through rdq.spi.limits."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from rdq.errors import ValidationError
from rdq.spi import DLQFilter, Envelope, Page, Selector, limits


def task(**changes: object) -> Envelope:
    fields: dict[str, object] = {"id": "t-1", "queue": "emails", "handler_ref": "app.jobs:send"}
    fields.update(changes)
    return Envelope(**fields)  # type: ignore[arg-type]


def test_a_well_formed_task_passes() -> None:
    assert limits.check_task(task(payload={"to": "a@example.com"})).id == "t-1"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"id": ""}, "id"),
        ({"id": "x" * 201}, "id"),
        ({"id": "has space"}, "id"),
        ({"id": "a/b"}, "id"),
        ({"queue": ""}, "queue"),
        ({"queue": "-starts-with-dash"}, "queue"),
        ({"queue": "q" * 101}, "queue"),
        ({"handler_ref": ""}, "handler_ref"),
        ({"handler_ref": "two words"}, "handler_ref"),
        ({"headers": {f"h{i}": "v" for i in range(65)}}, "headers"),
        ({"headers": {"h": "v" * 5000}}, "headers.h"),
        ({"payload": "x" * (limits.MAX_PAYLOAD_BYTES + 1)}, "payload"),
        ({"payload": object()}, "payload"),
        ({"attempt_count": -1}, "attempt_count"),
        ({"next_attempt_at": datetime(2030, 1, 1)}, "next_attempt_at"),
    ],
)
def test_bad_tasks_are_rejected_naming_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        limits.check_task(task(**changes))
    assert caught.value.field == field


@pytest.mark.parametrize("value", [0, -1, 1001, True, 2.5])
def test_limit_must_be_an_integer_from_1_to_1000(value: object) -> None:
    with pytest.raises(ValidationError, match="limit"):
        limits.check_limit(value)


@pytest.mark.parametrize("value", [timedelta(0), timedelta(seconds=-1), timedelta(days=2), 5])
def test_lease_must_be_positive_and_at_most_a_day(value: object) -> None:
    with pytest.raises(ValidationError, match="lease"):
        limits.check_lease(value)


def test_a_selector_needs_ids_or_a_filter_but_not_both() -> None:
    with pytest.raises(ValidationError, match="selector"):
        Selector()
    with pytest.raises(ValidationError, match="selector"):
        Selector(ids=["a"], filter=DLQFilter())
    assert limits.check_selector(Selector.by_ids("a", "b")).ids == ["a", "b"]
    assert limits.check_selector(Selector.by_filter()).filter == DLQFilter()


def test_selector_ids_are_checked_one_by_one() -> None:
    with pytest.raises(ValidationError) as caught:
        limits.check_selector(Selector(ids=["ok", "not ok"]))
    assert caught.value.field == "selector.ids[1]"


def test_page_limit_is_checked() -> None:
    with pytest.raises(ValidationError) as caught:
        limits.check_page(Page(limit=0))
    assert caught.value.field == "page.limit"
