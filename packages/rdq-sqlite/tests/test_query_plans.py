"""The statements on the hot paths are served by an index: no table scan, no sort."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdq_sqlite import _claims
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
        # schema 4: claims in a queue's own order (fair shares, aging) by group
        ("group_next", {"queue": "q", "after": ""}, "task_group"),
        ("group_priority", {"queue": "q", "grp": "g", "below": 11}, "task_group"),
        ("group_scan", {**SCAN, "grp": "g", "priority": 0}, "task_group"),
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


def _fill(conn: sqlite3.Connection, queue: str, tenant: str, count: int, start: int) -> None:
    conn.executemany(
        "INSERT INTO task (id, queue, handler_ref, status, next_attempt_at, created_at, keys) "
        "VALUES (?, ?, 'm:f', 'PENDING', ?, 0, ?)",
        [
            (f"{queue}/{tenant}/{start + i}", queue, 1_000 + i, f'["{tenant}"]')
            for i in range(count)
        ],
    )


def _claim_work(conn: sqlite3.Connection, queue: str) -> tuple[int, list[str]]:
    """SQLite virtual machine steps (in thousands) one claim of 10 takes, and what it took."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    conn.execute("BEGIN IMMEDIATE")
    conn.set_progress_handler(count, 1000)
    try:
        claimed = _claims.claim(conn, queue, 10, 60_000_000, "w")
    finally:
        conn.set_progress_handler(None, 0)
        conn.execute("ROLLBACK")
    return steps, [c.task.id for c in claimed]


@pytest.mark.parametrize(
    "control", ["fair = 'tenant:'", "aging = 1.0", "fair = 'tenant:', aging = 2.0"]
)
def test_a_claim_in_a_queues_own_order_costs_the_same_behind_a_backlog_ten_times_deeper(
    conn: sqlite3.Connection, control: str
) -> None:
    """Deterministic, not a race of clocks: the work (VM steps) of one claim of a queue with fair
    shares or aging behind 2,000 and 20,000 due tasks of one tenant, plus 3 of another."""
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT OR IGNORE INTO clock (one, now_us) VALUES (1, 0)")
    for queue, depth in (("small", 2_000), ("deep", 20_000)):
        conn.execute(
            "INSERT INTO control (queue, key, version, updated_at) VALUES (?, '*', 1, 0)",
            (queue,),
        )
        conn.execute(f"UPDATE control SET {control} WHERE queue = ? AND key = '*'", (queue,))
        _fill(conn, queue, "tenant:big", depth, 0)
        _fill(conn, queue, "tenant:small", 3, depth)
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    small, took_small = _claim_work(conn, "small")
    deep, took_deep = _claim_work(conn, "deep")
    assert len(took_small) == len(took_deep) == 10
    if "fair" in control:  # the small tenant's three within the first claim, behind any depth
        assert sum("tenant:small" in t for t in took_deep) == 3
    assert deep <= small * 1.5 + 5, (small, deep)
