"""Opaque keyset cursors (DLQ, task list, audit trail): bound to their queue and filter, and
StaleCursor when unusable."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rdq.errors import StaleCursor
from rdq.spi import (
    AuditFilter,
    DLQCursor,
    DLQFilter,
    KeysetCursor,
    Status,
    TaskFilter,
    audit_scope,
    task_scope,
)

AT = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def test_a_cursor_decodes_to_the_position_it_encodes() -> None:
    token = DLQCursor.after("q", None, AT, "task-9").encode()
    cursor = DLQCursor.decode(token, "q", None)
    assert (cursor.dead_lettered_at, cursor.id) == (AT, "task-9")


@pytest.mark.parametrize(
    ("queue", "dlq_filter"),
    [("other", None), ("q", DLQFilter(error_type="ValueError"))],
)
def test_a_cursor_from_another_queue_or_filter_is_stale(
    queue: str, dlq_filter: DLQFilter | None
) -> None:
    token = DLQCursor.after("q", None, AT, "task-9").encode()
    with pytest.raises(StaleCursor):
        DLQCursor.decode(token, queue, dlq_filter)


@pytest.mark.parametrize("token", ["", "garbage!", "e30", "WzEsMiwzXQ", "%%%"])
def test_a_malformed_cursor_is_stale(token: str) -> None:
    with pytest.raises(StaleCursor):
        DLQCursor.decode(token, "q", None)


def test_a_keyset_cursor_decodes_to_the_position_it_encodes_in_its_scope() -> None:
    scope = task_scope("q", TaskFilter(status=Status.PENDING))
    cursor = KeysetCursor.decode(KeysetCursor.after(scope, AT, "task-3").encode(), scope)
    assert (cursor.at, cursor.id) == (AT, "task-3")


@pytest.mark.parametrize(
    "other",
    [
        task_scope("other", TaskFilter(status=Status.PENDING)),
        task_scope("q", TaskFilter(status=Status.DEAD)),
        task_scope("q", TaskFilter(status=Status.PENDING, handler_ref="h")),
        audit_scope(None),
    ],
)
def test_a_keyset_cursor_of_another_queue_status_filter_or_listing_is_stale(other: str) -> None:
    token = KeysetCursor.after(task_scope("q", TaskFilter(status=Status.PENDING)), AT, "t").encode()
    with pytest.raises(StaleCursor):
        KeysetCursor.decode(token, other)


def test_audit_scopes_differ_by_filter_and_none_is_the_empty_filter() -> None:
    assert audit_scope(None) == audit_scope(AuditFilter())
    assert audit_scope(AuditFilter(queue="a")) != audit_scope(AuditFilter(queue="b"))


@pytest.mark.parametrize("token", ["", "garbage!", "e30", "WzEsMiwzXQ", "%%%"])
def test_a_malformed_keyset_cursor_is_stale(token: str) -> None:
    with pytest.raises(StaleCursor):
        KeysetCursor.decode(token, audit_scope(None))
