"""The documented input limits every backend enforces through rdq.spi.bounds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from rdq.errors import ValidationError
from rdq.spi import (
    Attempt,
    AuditEntry,
    AuditFilter,
    DLQFilter,
    Envelope,
    Outcome,
    Page,
    RetryOverride,
    Selector,
    Status,
    TaskFilter,
    bounds,
)


def task(**changes: object) -> Envelope:
    fields: dict[str, object] = {"id": "t-1", "queue": "emails", "handler_ref": "app.jobs:send"}
    fields.update(changes)
    return Envelope(**fields)  # type: ignore[arg-type]


def nested(levels: int) -> object:
    """A value nesting ``levels`` arrays (and an object at the bottom)."""
    value: object = {"leaf": "[[[{{"}  # brackets inside strings do not count
    for _ in range(levels - 1):
        value = [value]
    return value


def test_a_well_formed_task_passes() -> None:
    assert bounds.check_task(task(payload={"to": "a@example.com"})).id == "t-1"


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
        ({"payload": "x" * (bounds.MAX_PAYLOAD_BYTES + 1)}, "payload"),
        ({"payload": object()}, "payload"),
        ({"attempt_count": -1}, "attempt_count"),
        ({"next_attempt_at": datetime(2030, 1, 1)}, "next_attempt_at"),
        ({"attempt_count": "1"}, "attempt_count"),
        ({"redrive_count": 1.5}, "redrive_count"),
        ({"retry": RetryOverride(max_attempts="lots")}, "retry.max_attempts"),  # type: ignore[arg-type]
        ({"retry": RetryOverride(max_attempts=True)}, "retry.max_attempts"),
        ({"retry": RetryOverride(backoff=2)}, "retry.backoff"),  # type: ignore[arg-type]
        ({"retry": RetryOverride(base="soon")}, "retry.base"),  # type: ignore[arg-type]
        ({"retry": RetryOverride(cap=float("inf"))}, "retry.cap"),
        ({"retry": {"max_attempts": 3}}, "retry"),
        ({"attempts": [{"number": "one"}]}, "attempts[0]"),
        ({"attempts": [Attempt(number="one", outcome=Outcome.FAILED)]}, "attempts[0].number"),  # type: ignore[arg-type]
        ({"attempts": [Attempt(number=1, outcome="BOOM")]}, "attempts[0].outcome"),  # type: ignore[arg-type]
        ({"payload": nested(bounds.MAX_DEPTH + 1)}, "payload"),
        ({"payload": nested(5000)}, "payload"),  # beyond the encoder's recursion limit
        ({"extra": {"newer_field": nested(bounds.MAX_DEPTH + 1)}}, "newer_field"),
        ({"handler_ref": 5}, "handler_ref"),
        ({"headers": [("h", "v")]}, "headers"),
        ({"redrive_count": True}, "redrive_count"),
        ({"priority": True}, "priority"),
        ({"priority": 11}, "priority"),
        ({"keys": "tenant:acme"}, "keys"),
        ({"keys": ["tenant:acme", "tenant:acme"]}, "keys"),
        ({"keys": ["two words"]}, "keys[0]"),
        ({"format_version": True}, "format_version"),
        ({"format_version": "1"}, "format_version"),
        ({"extra": ["newer_field"]}, "extra"),
    ],
)
def test_bad_tasks_are_rejected_naming_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        bounds.check_task(task(**changes))
    assert caught.value.field == field


def test_a_name_is_judged_the_same_however_often_and_among_however_many_it_is_checked() -> None:
    class Spelled(str):
        """A ``str`` that hashes and compares as the valid name it does not spell."""

        def __hash__(self) -> int:
            return hash("emails")

        def __eq__(self, other: object) -> bool:
            return other == "emails" or str.__eq__(self, other)

    for _ in range(2):
        bounds.check_task(task(queue="emails", handler_ref="app.jobs:send"))
        with pytest.raises(ValidationError) as caught:
            bounds.check_task(task(queue="bad queue"))
        assert caught.value.field == "queue"
        with pytest.raises(ValidationError):
            bounds.check_task(task(queue=Spelled("bad queue")))
    # more names than check_task remembers: each is still judged by the rule alone
    for n in range(5000):
        bounds.check_task(task(queue=f"q-{n}", handler_ref=f"app.jobs:h{n}"))
    with pytest.raises(ValidationError) as caught:
        bounds.check_task(task(handler_ref="app.jobs: send"))
    assert caught.value.field == "handler_ref"


def test_a_payload_may_nest_up_to_the_depth_limit() -> None:
    bounds.check_task(task(payload=nested(bounds.MAX_DEPTH)))
    bounds.check_task(task(payload=["[" * 1000, {"a": "{" * 1000}], extra={"x": nested(64)}))
    bounds.check_depth(nested(bounds.MAX_DEPTH), "payload")
    with pytest.raises(ValidationError) as caught:
        bounds.check_depth({"a": nested(bounds.MAX_DEPTH)}, "extra_field")
    assert caught.value.field == "extra_field"


def test_times_must_lie_within_years_1_to_9999_in_utc() -> None:
    west, east = timezone(timedelta(hours=-5)), timezone(timedelta(hours=5))
    bounds.check_aware(datetime(9999, 12, 31, 18, tzinfo=west), "at")
    bounds.check_aware(datetime(1, 1, 1, 5, tzinfo=east), "at")
    for bad in (datetime(9999, 12, 31, 23, tzinfo=west), datetime(1, 1, 1, 4, tzinfo=east)):
        with pytest.raises(ValidationError) as caught:
            bounds.check_aware(bad, "at")
        assert caught.value.field == "at"
    with pytest.raises(ValidationError) as caught:
        bounds.check_task(task(next_attempt_at=datetime(9999, 12, 31, 23, tzinfo=west)))
    assert caught.value.field == "next_attempt_at"


def test_a_valid_retry_override_passes() -> None:
    retry = RetryOverride(max_attempts=3, backoff="fixed", base=1, cap=2.5, timeout=None)
    assert bounds.check_task(task(retry=retry)).retry == retry


@pytest.mark.parametrize("value", [0, -1, 1001, True, 2.5])
def test_limit_must_be_an_integer_from_1_to_1000(value: object) -> None:
    with pytest.raises(ValidationError, match="limit"):
        bounds.check_limit(value)


@pytest.mark.parametrize("value", [timedelta(0), timedelta(seconds=-1), timedelta(days=2), 5])
def test_lease_must_be_positive_and_at_most_a_day(value: object) -> None:
    with pytest.raises(ValidationError, match="lease"):
        bounds.check_lease(value)


def test_a_selector_needs_ids_or_a_filter_but_not_both() -> None:
    with pytest.raises(ValidationError, match="selector"):
        Selector()
    with pytest.raises(ValidationError, match="selector"):
        Selector(ids=["a"], filter=DLQFilter())
    assert bounds.check_selector(Selector.by_ids("a", "b")).ids == ["a", "b"]
    assert bounds.check_selector(Selector.by_filter()).filter == DLQFilter()


def test_selector_ids_are_checked_one_by_one() -> None:
    with pytest.raises(ValidationError) as caught:
        bounds.check_selector(Selector(ids=["ok", "not ok"]))
    assert caught.value.field == "selector.ids[1]"


def test_page_limit_is_checked() -> None:
    with pytest.raises(ValidationError) as caught:
        bounds.check_page(Page(limit=0))
    assert caught.value.field == "page.limit"


def test_delay_is_none_or_a_timedelta_from_zero_to_the_limit() -> None:
    assert bounds.check_delay(None) is None
    assert bounds.check_delay(timedelta(0)) == timedelta(0)
    assert bounds.check_delay(bounds.MAX_DELAY) == bounds.MAX_DELAY
    for bad in (timedelta(seconds=-1), bounds.MAX_DELAY + timedelta(microseconds=1), 5, "soon"):
        with pytest.raises(ValidationError) as caught:
            bounds.check_delay(bad)
        assert caught.value.field == "delay"


@pytest.mark.parametrize(
    ("attempt", "field"),
    [
        (Attempt(number=0, outcome=Outcome.FAILED), "attempt.number"),
        (Attempt(number=1, outcome="FAILED"), "attempt.outcome"),  # type: ignore[arg-type]
        (Attempt(number=1, outcome=Outcome.FAILED, error_type="x" * 1025), "attempt.error_type"),
        (
            Attempt(number=1, outcome=Outcome.FAILED, traceback="x" * 32769),
            "attempt.traceback",
        ),
        (Attempt(number=1, outcome=Outcome.FAILED, worker_id=""), "attempt.worker_id"),
        (
            Attempt(number=1, outcome=Outcome.FAILED, finished_at=datetime(2030, 1, 1)),
            "attempt.finished_at",
        ),
    ],
)
def test_attempt_records_are_checked_naming_the_field(attempt: Attempt, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        bounds.check_attempt(attempt)
    assert caught.value.field == field


@pytest.mark.parametrize("value", [11, -11, True, "1"])
def test_priority_is_an_integer_from_minus_10_to_10(value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        bounds.check_priority(value)
    assert caught.value.field == "priority"


@pytest.mark.parametrize("value", ["", "a\nb", "x" * 201, 7])
def test_worker_ids_are_short_printable_strings(value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        bounds.check_worker_id(value)
    assert caught.value.field == "worker_id"


def test_cancel_ids_are_a_bounded_list_of_valid_ids() -> None:
    assert bounds.check_ids(["a", "b"]) == ["a", "b"]
    for bad, field in ((["ok", ""], "ids[1]"), ("abc", "ids"), (["x"] * 10_001, "ids")):
        with pytest.raises(ValidationError) as caught:
            bounds.check_ids(bad)  # type: ignore[arg-type]
        assert caught.value.field == field


NOW = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"status": Status.DEAD}, "dead_lettered_at"),
        ({"status": Status.SUCCEEDED}, "completed_at"),
        ({"status": Status.IN_FLIGHT}, "lease_expires_at"),
        ({"status": Status.CANCELLED}, "cancelled_at"),
        ({"created_at": None}, "created_at"),
        ({"claimed_at": datetime(2030, 1, 1)}, "claimed_at"),
        ({"corrupt": "does not decode"}, "corrupt"),
        ({"attempts": [Attempt(number=0, outcome=Outcome.FAILED)]}, "attempts[0].number"),
    ],
)
def test_imported_tasks_need_their_status_time_and_valid_records(
    changes: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        bounds.check_imported_task(task(**({"created_at": NOW, "next_attempt_at": NOW} | changes)))
    assert caught.value.field == field


def test_an_import_is_at_most_1000_tasks() -> None:
    one = task(created_at=NOW, next_attempt_at=NOW)
    assert bounds.check_imported_tasks([one]) == [one]
    with pytest.raises(ValidationError) as caught:
        bounds.check_imported_tasks([one] * 1001)
    assert caught.value.field == "tasks"


def test_task_and_audit_filters_and_entries_are_checked() -> None:
    with pytest.raises(ValidationError) as caught:
        bounds.check_task_filter(TaskFilter(status=Status.DEAD, before=datetime(2030, 1, 1)))
    assert caught.value.field == "filter.before"
    with pytest.raises(ValidationError) as caught:
        bounds.check_audit_filter(AuditFilter(after=datetime(2030, 1, 1)))
    assert caught.value.field == "filter.after"
    with pytest.raises(ValidationError) as caught:
        bounds.check_audit_entry(AuditEntry(actor="ops", action="purge", queue="q", count=-1))
    assert caught.value.field == "entry.count"
