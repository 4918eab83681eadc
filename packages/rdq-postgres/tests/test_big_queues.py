"""What keeps the store fast on a big table: the claim reads only due index entries in
priority order, and queue counts above the exact-count threshold are estimates."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from rdq.spi import Status, bounds
from rdq_postgres import PostgresStorage

ClaimPlan = Callable[..., Awaitable[list[dict[str, Any]]]]
"""The fixture ``claim_plan``: its signature is conftest.py's ``ClaimPlan``."""

THRESHOLD = bounds.EXACT_COUNT_THRESHOLD


async def _insert(
    conn: asyncpg.Connection,
    schema: str,
    queue: str,
    status: str,
    count: int,
    prefix: str = "",
    **sql: str,
) -> None:
    """``count`` tasks of ``queue`` in ``status`` written in one statement; ``sql`` gives SQL
    expressions (over ``g``, the row number) for columns."""
    columns = {
        "next_attempt_at": "now() - interval '1 hour'",
        "completed_at": "now()" if status == "SUCCEEDED" else "NULL",
        "dead_lettered_at": "now()" if status == "DEAD" else "NULL",
        "priority": "0",
        **sql,
    }
    names = ", ".join(columns)
    values = ", ".join(columns.values())
    await conn.execute(
        f'INSERT INTO "{schema}".task (id, queue, handler_ref, status, {names}) '
        f"SELECT $1 || g, $2, 'm:f', $3, {values} FROM generate_series(1, $4) AS g",
        f"{prefix}{queue}-{status}-",
        queue,
        status,
        count,
    )


@pytest.mark.asyncio
async def test_counts_up_to_the_threshold_are_exact_and_above_it_estimated(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    conn = await asyncpg.connect(postgres_url)
    try:
        await _insert(conn, schema, "at", "PENDING", THRESHOLD)
        await _insert(conn, schema, "above", "PENDING", THRESHOLD + 1)
        await _insert(conn, schema, "above", "DEAD", 12)
        await _insert(conn, schema, "big", "SUCCEEDED", 3 * THRESHOLD)
        await _insert(conn, schema, "big", "PENDING", 7)
    finally:
        await conn.close()

    at = await storage.stats("at")
    assert (at.pending, at.estimated) == (THRESHOLD, ())
    above = await storage.stats("above")
    assert above.estimated == ("pending",)
    assert above.pending >= THRESHOLD + 1, "an estimate is never below what was counted"
    assert above.dlq_depth == 12

    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute(f'ANALYZE "{schema}".task')
    finally:
        await conn.close()
    big = await storage.stats("big")
    assert big.estimated == ("succeeded",)
    assert abs(big.succeeded - 3 * THRESHOLD) <= 0.1 * 3 * THRESHOLD, big
    assert (big.pending, big.in_flight, big.dlq_depth, big.cancelled) == (7, 0, 0, 0)
    assert big.oldest_pending_age is not None and big.oldest_pending_age >= 3500

    listed = {s.queue: s for s in await storage.list_queues()}
    assert sorted(listed) == ["above", "at", "big"]
    assert listed["at"].estimated == () and listed["big"].estimated == ("succeeded",)


@pytest.mark.asyncio
async def test_the_claim_is_one_index_scan_in_priority_order_that_skips_delayed_tasks(
    storage: PostgresStorage, postgres_url: str, schema: str, claim_plan: ClaimPlan
) -> None:
    """50,000 tasks of the highest priority delayed by a month and 3,000 due ones of lower
    priorities: the claim of 10 reads a few index pages, sorts nothing and returns the due
    tasks of the highest due priority first. The plan is the one claim_due() runs at every
    claim (generic: planned for any queue and any limit), so no limit makes it scan the
    table."""
    conn = await asyncpg.connect(postgres_url)
    try:
        later = {"next_attempt_at": "now() + interval '30 days'", "priority": "10"}
        await _insert(conn, schema, "q", "PENDING", 50_000, **later)
        due = {"next_attempt_at": "now() - g * interval '1 second'", "priority": "(g % 3) - 1"}
        await _insert(conn, schema, "q", "PENDING", 3_000, prefix="due-", **due)
        await _insert(conn, schema, "other", "PENDING", 20_000, priority="(g % 21) - 10")
        await conn.execute(f'VACUUM ANALYZE "{schema}".task')
    finally:
        await conn.close()

    nodes = await claim_plan(storage, "q", 10)
    scans = [n for n in nodes if "Scan" in n["Node Type"] and n.get("Index Name")]
    claim_scan = [n for n in scans if n["Index Name"] == "task_claim_priority_idx"]
    assert len(claim_scan) == 1, [n.get("Index Name") for n in scans]
    assert claim_scan[0]["Node Type"] == "Index Scan"
    assert claim_scan[0]["Actual Rows"] == 10
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort", "Seq Scan")]
    updated = [n for n in scans if n["Index Name"] == "task_pkey"]
    assert updated, "the claimed rows are updated by primary key, never by a scan of the table"
    read = claim_scan[0]["Shared Hit Blocks"] + claim_scan[0]["Shared Read Blocks"]
    assert read < 150, f"the claim read {read} pages: it scanned delayed entries"

    claimed = await storage.claim_due("q", 10, timedelta(seconds=30))
    assert [c.task.priority for c in claimed] == [1] * 10
    due_at = [c.task.next_attempt_at for c in claimed]
    assert due_at == sorted(due_at), "oldest due first within a priority"


@pytest.mark.asyncio
async def test_a_claim_planned_on_a_small_table_reads_no_more_than_it_claims(
    storage: PostgresStorage, postgres_url: str, schema: str, claim_plan: ClaimPlan
) -> None:
    """A worker that connects while the table is small plans its claim once, for that size.
    With 300 succeeded tasks and one due the planner would scan the table and hash it to find
    the one row to claim; schema version 8 leaves it the index plan, whatever the size."""
    conn = await asyncpg.connect(postgres_url)
    try:
        await _insert(conn, schema, "q", "SUCCEEDED", 300, prefix="done-")
        await _insert(conn, schema, "q", "PENDING", 1)
        await conn.execute(f'VACUUM ANALYZE "{schema}".task')
    finally:
        await conn.close()

    nodes = await claim_plan(storage, "q", 1)
    types = [n["Node Type"] for n in nodes]
    assert not {"Seq Scan", "Hash Join", "Merge Join"} & set(types), types
    updated = [n for n in nodes if n.get("Index Name") == "task_pkey"]
    assert updated and updated[0]["Actual Rows"] == 1, "one primary-key lookup per claimed row"
    (claimed,) = await storage.claim_due("q", 1, timedelta(seconds=30))
    assert claimed.task.status == Status.IN_FLIGHT


@pytest.mark.asyncio
async def test_a_claim_planned_while_the_statistics_say_empty_reads_no_more_than_it_claims(
    storage: PostgresStorage, postgres_url: str, schema: str, claim_plan: ClaimPlan
) -> None:
    """A burst of tasks into a table that was analyzed while empty: until autovacuum analyzes
    it again, the planner takes every condition of the claim for its default selectivity and
    expects one row. Planned so, the claim sorted every due task to take ten (52 ms a claim of 10
    at 60,000 due); schema version 9 leaves it the ordered index scan."""
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute(f'VACUUM ANALYZE "{schema}".task')
        due = {"next_attempt_at": "now() - g * interval '1 second'"}
        await _insert(conn, schema, "q", "PENDING", 5_000, **due)
    finally:
        await conn.close()

    nodes = await claim_plan(storage, "q", 10)
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")], [
        n["Node Type"] for n in nodes
    ]
    scans = [n for n in nodes if n.get("Index Name") == "task_claim_priority_idx"]
    assert len(scans) == 1 and scans[0]["Actual Rows"] == 10, [n.get("Index Name") for n in nodes]
    claimed = await storage.claim_due("q", 10, timedelta(seconds=30))
    due_at = [c.task.next_attempt_at for c in claimed]
    assert len(claimed) == 10 and due_at == sorted(due_at), "the oldest due first"


@pytest.mark.asyncio
async def test_a_claim_planned_on_the_empty_table_reads_by_primary_key_once_it_fills(
    storage: PostgresStorage, postgres_url: str, schema: str, claim_plan: ClaimPlan
) -> None:
    """A worker connected to the empty table plans its claim then and keeps that plan while a
    burst of tasks arrives. Planned so, the update scanned the whole primary key to find the
    rows it claimed (168 ms a claim of 10 at 60,000 due); schema version 9 reads it for the
    claimed ids only."""
    worker = await asyncpg.connect(postgres_url)
    try:
        await worker.execute(f'VACUUM ANALYZE "{schema}".task')
        assert await claim_plan(storage, "q", 10, on=worker)  # planned here, on no rows
        due = {"next_attempt_at": "now() - g * interval '1 second'"}
        await _insert(worker, schema, "q", "PENDING", 5_000, **due)
        nodes = await claim_plan(storage, "q", 10, on=worker)
    finally:
        await worker.close()

    by_key = [n for n in nodes if n.get("Index Name") == "task_pkey"]
    assert by_key, [n["Node Type"] for n in nodes]
    read = sum(n["Actual Rows"] * n["Actual Loops"] for n in by_key)
    assert read <= 10, f"the update read {read} rows of the primary key to claim 10"
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort", "Seq Scan")]


@pytest.mark.asyncio
async def test_a_claim_from_a_deep_queue_updates_by_primary_key_at_any_limit(
    storage: PostgresStorage, postgres_url: str, schema: str, claim_plan: ClaimPlan
) -> None:
    """claim_due() plans its statement once, for any queue and limit. With 100,000 due tasks
    that plan must still update the claimed rows by primary key: a join of the claimed ids
    would be planned for 10 % of the due tasks, i.e. a hash join over the whole table."""
    conn = await asyncpg.connect(postgres_url)
    try:
        await _insert(conn, schema, "deep", "PENDING", 100_000)
        await conn.execute(f'VACUUM ANALYZE "{schema}".task')
    finally:
        await conn.close()

    for limit in (1, bounds.MAX_LIMIT):
        nodes = await claim_plan(storage, "deep", limit)
        assert not [n for n in nodes if n["Node Type"] in ("Seq Scan", "Hash Join")], limit
        by_key = [n for n in nodes if n.get("Index Name") == "task_pkey"]
        assert by_key, limit
        assert by_key[0]["Actual Rows"] * by_key[0]["Actual Loops"] == limit, limit
    claimed = await storage.claim_due("deep", bounds.MAX_LIMIT, timedelta(seconds=30))
    assert len({c.task.id for c in claimed}) == bounds.MAX_LIMIT
