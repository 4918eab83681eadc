"""Opaque DLQ cursors: bound to their queue and filter, and StaleCursor when unusable."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rdq.errors import StaleCursor
from rdq.spi import DLQCursor, DLQFilter

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
