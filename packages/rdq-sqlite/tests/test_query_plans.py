"""The statements on the hot paths are served by an index: no table scan, no sort."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdq_sqlite._migrate import apply_migrations
from rdq_sqlite._queries import SQL


@pytest.fixture
def conn(database: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(database, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    apply_migrations(conn, str(database))
    conn.execute("COMMIT")
    yield conn
    conn.close()


def plan(conn: sqlite3.Connection, statement: str, params: dict[str, object]) -> str:
    rows = conn.execute("EXPLAIN QUERY PLAN " + statement, params).fetchall()
    return "\n".join(row[-1] for row in rows)


FILTER = {"error_type": None, "handler_ref": None, "lo": 0, "hi": 1}
SCAN = {"queue": "q", "now": 1, "after_at": 0, "after_id": "", "limit": 10}
HOLD = {"queue": "q", "key": "k", "now": 1, "chunk": 100}


@pytest.mark.parametrize(
    ("name", "params", "index"),
    [
        ("claim_next_priority", {"queue": "q", "below": 11}, "task_claim"),
        ("claim_candidates", {"queue": "q", "priority": 0, "now": 1, "limit": 10}, "task_claim"),
        (
            "list_tasks",
            {
                "queue": "q",
                "status": "DEAD",
                "after_at": 0,
                "after_id": "",
                "limit": 10,
                "with_attempts": False,
                "error_type": None,
                "handler_ref": None,
                "hi": 1,
            },
            "task_status",
        ),
        ("oldest_pending", {"queue": "q"}, "task_status"),
        ("next_due", {"queue": "q"}, "task_claim"),
        ("queue_counts", {"queue": "q"}, "task_status"),
        ("cancel", {"queue": "q", "ids": '["a"]', "now": 1}, "sqlite_autoindex_task_1"),
        ("redrive_ids", {"queue": "q", "ids": '["a"]', "now": 1}, "sqlite_autoindex_task_1"),
        ("purge_ids", {"queue": "q", "ids": '["a"]'}, "sqlite_autoindex_task_1"),
        ("redrive_filter", {"queue": "q", "now": 1, **FILTER}, "task_status"),
        ("dlq_groups", {"queue": "q"}, "task_status"),
        ("purge_finished", {"queue": "q", "before": 1, "chunk": 100}, "task_status"),
        # contract version 3: claims through controls, held tasks, live leases per key
        ("claim_scan", {**SCAN, "priority": 0}, "task_claim"),
        ("held_keys", {"queue": "q", "after": ""}, "task_held"),
        ("held_priority", {"queue": "q", "key": "k", "below": 11}, "task_held"),
        ("held_candidates", {**SCAN, "key": "k", "priority": 0}, "task_held"),
        ("release_held", {"queue": "q", "key": "k"}, "task_held"),
        ("hold", {"id": "a", "key": "k"}, "sqlite_autoindex_task_1"),
        ("hold_handler", {**HOLD, "handler_ref": "m:f"}, "task_claim"),
        ("hold_key", HOLD, "task_claim"),
        ("retry_now", {"queue": "q", "ids": '["a"]', "now": 1}, "sqlite_autoindex_task_1"),
        ("in_use", {"queue": "q", "now": 1}, "task_status"),
    ],
)
def test_a_hot_statement_seeks_its_index_and_never_sorts(
    conn: sqlite3.Connection, name: str, params: dict[str, object], index: str
) -> None:
    text = plan(conn, getattr(SQL, name), params)
    assert f"INDEX {index}" in text, text
    assert "SCAN task" not in text, text
    if name.startswith(("claim", "list", "held")):
        assert "TEMP B-TREE" not in text, text
    if name == "list_tasks":  # the page starts at its keyset position, not at the first row
        assert "(status_at,id)>(?,?)" in text, text


def test_counting_a_queue_reads_the_index_alone(conn: sqlite3.Connection) -> None:
    assert "COVERING INDEX task_status" in plan(conn, SQL.queue_counts, {"queue": "q"})
    assert "COVERING INDEX task_status" in plan(conn, SQL.counts, {})


def test_a_claim_learns_whether_its_queue_has_controls_from_two_seeks_with_the_clock(
    conn: sqlite3.Connection,
) -> None:
    text = plan(conn, SQL.claim_clock, {"queue": "q"})
    assert "SEARCH control USING PRIMARY KEY (queue=?)" in text, text
    assert "SEARCH task USING INDEX task_held (queue=?" in text, text
    assert "SCAN" not in text, text


def test_live_leases_per_key_are_counted_from_the_range_of_live_leases_alone(
    conn: sqlite3.Connection,
) -> None:
    text = plan(conn, SQL.in_use, {"queue": "q", "now": 1})
    assert text.count("task_status (queue=? AND status=? AND status_at>?)") == 3, text
    assert "SCAN task" not in text, text
