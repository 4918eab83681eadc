"""Plans made on a table analyzed empty (schema version 19): a worker that connected while the
task table was analyzed empty (or nearly) keeps the plans it made then for as long as it stays
connected, or until autovacuum analyzes the table again. Those plans must not read the whole
table: the count of a limit's live leases reads task_live_idx, and a controlled claim's lease
update and a batch of completions read their rows by primary key, however many tasks have
arrived since."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from rdq.spi import QUEUE_KEY, Control, Envelope
from rdq_postgres import PostgresStorage

from .conftest import _nodes


class _Rollback(Exception):
    """Ends the transaction of a plan with a rollback."""


Run = Callable[[asyncpg.Connection], Awaitable[object]]


async def _claim(storage: PostgresStorage, conn: asyncpg.Connection, limit: int) -> None:
    claim = storage._sql.claim_controlled
    values = {"queue": "q", "limit": limit, "lease_us": 30_000_000, "worker_id": "w"}
    await conn.fetch(claim.text, *claim.args(values))


async def _plans(conn: asyncpg.Connection, run: Run) -> dict[str, list[dict[str, Any]]]:
    """The nodes of each statement ``run(conn)`` runs (as auto_explain logs them: the plans
    ``conn`` keeps), by the statement's first words; rolled back after."""
    logged: list[str] = []
    conn.add_log_listener(lambda _conn, message: logged.append(message.message))
    try:
        async with conn.transaction():
            await conn.execute("LOAD 'auto_explain'")
            for setting, value in {
                "auto_explain.log_min_duration": "0",
                "auto_explain.log_analyze": "on",
                "auto_explain.log_nested_statements": "on",
                "auto_explain.log_format": "json",
                "client_min_messages": "log",
            }.items():
                await conn.execute(f"SET LOCAL {setting} = '{value}'")
            await run(conn)
            raise _Rollback
    except _Rollback:
        pass
    plans = [json.loads(m.split("plan:", 1)[1]) for m in logged if "plan:" in m]
    return {" ".join(p["Query Text"].split()[:3]): _nodes(p["Plan"]) for p in plans}


async def _insert(conn: asyncpg.Connection, schema: str, status: str, count: int) -> None:
    await conn.execute(
        f'INSERT INTO "{schema}".task (id, queue, handler_ref, status, next_attempt_at, '
        "completed_at) SELECT $1 || $2 || g, 'q', 'm:f', $1, now() - g * interval '1 ms', "
        "CASE WHEN $1 = 'SUCCEEDED' THEN now() END FROM generate_series(1, $3) AS g",
        status,
        f"-{count}-",
        count,
    )


@pytest.mark.asyncio
async def test_a_limited_claim_planned_on_the_empty_table_reads_no_more_once_it_fills(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """Planned on the empty table, the count scanned every row of the table and the lease
    update scanned and hashed it (a queue with a limit that never bound fell behind half its
    capacity); schema version 19 leaves both an index plan."""
    await storage.put_control(
        Control(queue="q", key=QUEUE_KEY, concurrency=1000), expected_version=0
    )
    worker = await asyncpg.connect(postgres_url)
    try:
        await worker.execute(f'ALTER TABLE "{schema}".task SET (autovacuum_enabled = off)')
        await _insert(worker, schema, "PENDING", 1)
        await worker.execute(f'VACUUM ANALYZE "{schema}".task')
        await _claim(storage, worker, 10)  # planned here, on one row: every statement runs
        await _insert(worker, schema, "SUCCEEDED", 5_000)
        await _insert(worker, schema, "PENDING", 5_000)
        plans = await _plans(worker, lambda conn: _claim(storage, conn, 10))
    finally:
        await worker.close()

    count = plans["SELECT count(*) FROM"]
    assert not [n for n in count if n["Node Type"] == "Seq Scan"], [n["Node Type"] for n in count]
    assert [n for n in count if n.get("Index Name") == "task_live_idx"], count
    lease = plans["WITH leased AS"]
    assert not [n for n in lease if n["Node Type"] in ("Seq Scan", "Hash Join", "Merge Join")], [
        n["Node Type"] for n in lease
    ]
    by_key = [n for n in lease if n.get("Index Name") == "task_pkey"]
    assert by_key, [n["Node Type"] for n in lease]
    read = sum(n["Actual Rows"] * n["Actual Loops"] for n in by_key)
    assert read == 10, f"the lease update read {read} rows of the primary key to claim 10"


@pytest.mark.asyncio
@pytest.mark.parametrize("statement", ["complete_many", "complete_many_discarding"])
async def test_a_batch_of_completions_planned_on_the_empty_table_reads_by_primary_key(
    storage: PostgresStorage, postgres_url: str, schema: str, statement: str
) -> None:
    """Batched completions name their tasks by id and fence each on its token. Sent as one
    statement joined to the items, a plan made from a table analyzed small read every claimed
    task (``status = 'IN_FLIGHT'`` on task_live_idx: 15 ms to complete 10 of 5,000 in flight,
    and every dead entry a held xmin keeps) or scanned the whole table; complete_claims()
    reads one row per item by primary key, whatever the statistics."""
    worker = await asyncpg.connect(postgres_url)
    sql = getattr(storage._sql, statement)

    def completing(claimed: list[Any]) -> Run:
        values: dict[str, Any] = {
            "ids": [c.task.id for c in claimed],
            "tokens": [c.token for c in claimed],
            "attempts": ['{"number": 1, "outcome": "SUCCEEDED"}'] * len(claimed),
            "error_types": [None] * len(claimed),
        }
        if statement == "complete_many_discarding":
            values["discards"] = [n % 2 == 0 for n in range(len(claimed))]
        return lambda conn: conn.fetchrow(sql.text, *sql.args(values))

    try:
        await worker.execute(f'ALTER TABLE "{schema}".task SET (autovacuum_enabled = off)')
        await storage.enqueue_batch([Envelope(id="first", queue="q", handler_ref="h")])
        await worker.execute(f'VACUUM ANALYZE "{schema}".task')
        first = await storage.claim_due("q", 1, timedelta(seconds=30))
        row = await completing(first)(worker)  # planned here, on one row
        assert row is not None and row["done"] == [first[0].task.id]
        await storage.enqueue_batch(
            [Envelope(id=f"t{n}", queue="q", handler_ref="h") for n in range(5_000)]
        )
        claimed = await storage.claim_due("q", 1000, timedelta(seconds=30))
        for _ in range(4):
            claimed += await storage.claim_due("q", 1000, timedelta(seconds=30))
        assert len(claimed) == 5_000
        plans = await _plans(worker, completing(claimed[:10]))
        row = await completing(claimed[:10])(worker)
    finally:
        await worker.close()

    assert row is not None and sorted(row["done"]) == sorted(c.task.id for c in claimed[:10])
    nodes = [n for found in plans.values() for n in found]  # every statement the batch ran
    assert [n for n in nodes if n.get("Relation Name") == "task"], list(plans)
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], [n["Node Type"] for n in nodes]
    # (a discarded task's dedup rows go by their own index, dedup_task_idx)
    indexes = {n["Index Name"] for n in nodes if n.get("Index Name", "").startswith("task_")}
    assert indexes == {"task_pkey"}, indexes
    scans = [n for n in nodes if n.get("Relation Name") == "task" and "Scan" in n["Node Type"]]
    read = sum(n["Actual Rows"] * n["Actual Loops"] for n in scans)
    assert read == 10, f"read {read} rows of the task table to complete 10"
