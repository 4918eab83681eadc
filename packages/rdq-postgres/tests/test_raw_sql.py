"""The cross-language contract: a worker with nothing but SQL admits, claims and resolves tasks.

The statements below are the ones ``docs/postgres-schema.md`` documents (the claim of a queue
with controls is ``claim_controlled()``, which honours those written by either side); they
are written out here on purpose (not loaded from the plugin), so a change to the schema that
breaks foreign workers breaks this test."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

from rdq.spi import Envelope, Outcome, Page, Status
from rdq_postgres import PostgresStorage

LEASE_US = 30_000_000
"""A 30-second lease, as the claim takes it: whole microseconds."""

CLAIM = """
SELECT id, token, handler_ref, payload::text AS payload, headers, priority, keys, attempt_count,
       attempts, lease_expires_at, retry, quarantine, claimed_rank
FROM {s}.claim_due($1, $2, $3, $4)
"""

CLAIM_V6 = """
WITH due AS (
    SELECT id, due_at
    FROM {s}.task
    WHERE priority = ANY ('{{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}}'::smallint[])
      AND queue = $1
      AND status IN ('PENDING', 'IN_FLIGHT')
      AND due_at <= now()
      AND {s}.unrestricted($1)
    ORDER BY priority DESC, due_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE {s}.task AS t
SET status = 'IN_FLIGHT',
    token = gen_random_uuid()::text,
    claimed_at = now(),
    claimed_by = $4,
    lease_expires_at = now() + $3::bigint * interval '1 microsecond',
    attempt_count = t.attempt_count + CASE WHEN t.status = 'IN_FLIGHT' THEN 1 ELSE 0 END,
    error_type = CASE WHEN t.status = 'IN_FLIGHT' THEN 'LeaseExpired' ELSE t.error_type END,
    attempts = CASE
        WHEN t.status = 'IN_FLIGHT' THEN {s}.append_attempt(CASE
            WHEN json_typeof(t.attempts) = 'array' THEN t.attempts ELSE '[]' END,
            json_build_object(
                'number', t.attempt_count + 1,
                'outcome', 'LEASE_EXPIRED',
                'error_type', 'LeaseExpired',
                'error_message', 'lease expired at ' || {s}.rfc3339(t.lease_expires_at)
                    || ' before the attempt was resolved',
                'started_at', {s}.rfc3339(t.claimed_at),
                'finished_at', {s}.rfc3339(now()),
                'worker_id', t.claimed_by))
        ELSE t.attempts
    END,
    quarantine = CASE WHEN t.status = 'IN_FLIGHT' AND json_typeof(t.attempts) <> 'array'
        THEN {s}.quarantine_add(t.quarantine, 'attempts', t.attempts) ELSE t.quarantine END
FROM due
WHERE t.id = due.id
RETURNING t.id, t.token, t.handler_ref, t.payload::text AS payload, t.headers, t.priority,
          t.keys, t.attempt_count, t.attempts, t.lease_expires_at, t.retry, t.quarantine,
          due.due_at
"""
"""The claim statement of schema version 6, which its bindings run themselves: it claims the
same tasks on a schema of version 7."""

CLAIMS = pytest.mark.parametrize("claim_sql", [CLAIM, CLAIM_V6], ids=["claim_due", "v6"])

CLAIM_CONTROLLED = """
SELECT (h.claimed).id, (h.claimed).token, (h.claimed).handler_ref,
       (h.claimed).payload::text AS payload, (h.claimed).headers, (h.claimed).priority,
       (h.claimed).keys, (h.claimed).attempt_count, (h.claimed).attempts,
       (h.claimed).lease_expires_at, (h.claimed).retry, (h.claimed).quarantine,
       h.claimed_due_at AS due_at
FROM {s}.claim_controlled($1, $2, $3, $4) AS h
"""


async def sql_claim(
    conn: asyncpg.Connection, s: str, queue: str, limit: int, worker: str | None
) -> list[asyncpg.Record]:
    """A foreign worker's claim: CLAIM, and CLAIM_CONTROLLED for a queue CLAIM refuses
    (SQLSTATE RQ423: a control restricts it)."""
    try:
        return await conn.fetch(CLAIM.format(s=s), queue, limit, LEASE_US, worker)
    except asyncpg.PostgresError as exc:
        if exc.sqlstate != "RQ423":
            raise
    return await conn.fetch(CLAIM_CONTROLLED.format(s=s), queue, limit, LEASE_US, worker)


COMPLETE = """
UPDATE {s}.task
SET status = 'SUCCEEDED', completed_at = now(),
    lease_expires_at = NULL, claimed_at = NULL, claimed_by = NULL, token = NULL,
    attempts = CASE WHEN json_typeof(attempts) = 'array'
        THEN {s}.append_attempt(attempts, $3::json) ELSE json_build_array($3::json) END,
    quarantine = CASE WHEN json_typeof(attempts) = 'array'
        THEN quarantine ELSE {s}.quarantine_add(quarantine, 'attempts', attempts) END,
    attempt_count = attempt_count + 1, error_type = $4
WHERE id = $1 AND token = $2 AND status = 'IN_FLIGHT'
"""

ENQUEUE = """
WITH admitted AS (
    INSERT INTO {s}.task (id, queue, handler_ref, payload, headers, status, priority, keys,
                          next_attempt_at)
    VALUES ($1, $2, $3, $4::json, '{{}}', 'PENDING', $5, $6::text[],
            now())
    ON CONFLICT (id) DO NOTHING
    RETURNING queue, next_attempt_at
)
SELECT {s}.lower_floor(queue, next_attempt_at) FROM admitted
"""

PUT_CONTROL = """
INSERT INTO {s}.control (queue, key, paused, gate, version)
VALUES ($1, $2, $3, $4, 1)
ON CONFLICT (queue, key) DO NOTHING
"""

CANCEL = """
UPDATE {s}.task
SET status = 'CANCELLED', cancelled_at = now(),
    lease_expires_at = NULL, claimed_at = NULL, claimed_by = NULL, token = NULL
WHERE queue = $1 AND id = ANY($2::text[]) AND status IN ('PENDING', 'IN_FLIGHT')
"""

AUDIT = """
INSERT INTO {s}.audit (actor, action, queue, selector, count, reason, error)
VALUES ($1, $2, $3, $4::json, $5, $6, $7)
RETURNING id, time
"""

SUCCESS_RECORD = (
    '{"number": 1, "outcome": "SUCCEEDED", "started_at": "2026-11-30T01:02:03.000004Z",'
    ' "finished_at": "2026-11-30T01:02:04Z", "worker_id": "sql-worker"}'
)


@CLAIMS
@pytest.mark.asyncio
async def test_a_plain_sql_worker_claims_and_completes(
    storage: PostgresStorage, postgres_url: str, schema: str, claim_sql: str
) -> None:
    s = f'"{schema}"'
    await storage.enqueue(
        Envelope(id="from-python", queue="mixed", handler_ref="app:job", payload={"n": 1})
    )
    conn = await asyncpg.connect(postgres_url)
    try:
        claim = claim_sql.format(s=s)
        row = await conn.fetchrow(claim, "mixed", 1, LEASE_US, "sql-worker")
        assert row is not None
        assert row["id"] == "from-python"
        assert row["payload"] == '{"n":1}'
        assert await conn.fetchrow(claim, "mixed", 1, LEASE_US, None) is None
        complete = COMPLETE.format(s=s)
        assert await conn.execute(complete, row["id"], "stale", SUCCESS_RECORD, None) == (
            "UPDATE 0"
        )
        claimed = await storage.get("from-python")
        assert (claimed.claimed_by, claimed.status) == ("sql-worker", Status.IN_FLIGHT)
        assert await conn.execute(complete, row["id"], row["token"], SUCCESS_RECORD, None) == (
            "UPDATE 1"
        )
        # ...and tasks admitted with SQL are claimed by the Python store, by priority.
        enqueue = ENQUEUE.format(s=s)
        await conn.execute(enqueue, "from-sql-low", "mixed", "app:job", '{"n": 2}', -3, [])
        await conn.execute(enqueue, "from-sql-high", "mixed", "app:job", '{"n": 3}', 7, ["k"])
        await conn.execute(enqueue, "to-cancel", "other", "app:job", "null", 0, [])
        assert await conn.execute(CANCEL.format(s=s), "other", ["to-cancel"]) == "UPDATE 1"
        audit = await conn.fetchrow(
            AUDIT.format(s=s), "sql-tool", "cancel", "other", '{"ids": ["to-cancel"]}', 1, "x", None
        )
    finally:
        await conn.close()

    done = await storage.get("from-python")
    assert done.status == Status.SUCCEEDED
    assert done.completed_at is not None and done.claimed_by is None
    assert [(a.number, a.outcome, a.worker_id) for a in done.attempts] == [
        (1, Outcome.SUCCEEDED, "sql-worker")
    ]
    assert done.attempt_count == 1

    claimed = await storage.claim_due("mixed", 10, timedelta(seconds=5))
    assert [(c.task.id, c.task.payload, c.task.priority, c.task.keys) for c in claimed] == [
        ("from-sql-high", {"n": 3}, 7, ["k"]),
        ("from-sql-low", {"n": 2}, -3, []),
    ]
    assert (await storage.get("to-cancel")).status == Status.CANCELLED
    [entry], _ = await storage.list_audit(None, Page())
    assert (entry.id, entry.actor, entry.selector) == (
        audit["id"],
        "sql-tool",
        {"ids": ["to-cancel"]},
    )


@CLAIMS
@pytest.mark.asyncio
async def test_a_lapsed_lease_claimed_with_sql_names_its_holder(
    storage: PostgresStorage, postgres_url: str, schema: str, claim_sql: str
) -> None:
    await storage.enqueue(Envelope(id="t", queue="q", handler_ref="app:job"))
    [first] = await storage.claim_due("q", 1, timedelta(milliseconds=1), worker_id="py-worker")
    assert first.task.lease_expires_at is not None
    while await storage.now() <= first.task.lease_expires_at:
        pass
    conn = await asyncpg.connect(postgres_url)
    try:
        row = await conn.fetchrow(claim_sql.format(s=f'"{schema}"'), "q", 1, LEASE_US, "sql-worker")
    finally:
        await conn.close()
    assert row is not None and row["attempt_count"] == 1
    task = await storage.get("t")
    [record] = task.attempts
    assert (record.outcome, record.worker_id, record.started_at) == (
        Outcome.LEASE_EXPIRED,
        "py-worker",
        first.task.claimed_at,
    )
    assert task.claimed_by == "sql-worker"


@pytest.mark.asyncio
async def test_the_sql_claim_honours_the_controls_either_side_writes(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    """A pause and a gate written with SQL hold back the Python store's claims; a pause the
    Python store writes holds back the SQL claim, which takes what the gate lets through."""
    s = f'"{schema}"'
    conn = await asyncpg.connect(postgres_url)
    try:
        enqueue = ENQUEUE.format(s=s)
        for n in range(3):
            await conn.execute(enqueue, f"k{n}", "flow", "app:job", "null", 0, ["dep:x"])
            await conn.execute(enqueue, f"f{n}", "flow", "app:other", "null", 0, [])
        await conn.execute(PUT_CONTROL.format(s=s), "flow", "dep:x", True, None)
        claimed = await storage.claim_due("flow", 10, timedelta(seconds=30))
        assert sorted(c.task.id for c in claimed) == ["f0", "f1", "f2"]
        await conn.execute(PUT_CONTROL.format(s=s), "flow", "handler:app:job", False, 2)
        (paused,) = [c for c in await storage.list_controls("flow") if c.key == "dep:x"]
        await storage.delete_control("flow", "dep:x", expected_version=paused.version)
        for claim_sql in (CLAIM, CLAIM_V6):
            with pytest.raises(asyncpg.PostgresError) as refused:
                await conn.fetch(claim_sql.format(s=s), "flow", 10, LEASE_US, "sql-worker")
            assert refused.value.sqlstate == "RQ423", "the plain claim refuses a controlled queue"
        rows = await sql_claim(conn, s, "flow", 10, "sql-worker")
        assert sorted(r["id"] for r in rows) == ["k0", "k1"], "the gate of 2"
        assert all(r["keys"] == ["dep:x"] for r in rows)
        assert await sql_claim(conn, s, "flow", 10, "sql-worker") == []
    finally:
        await conn.close()
    (gate,) = await storage.list_controls("flow")
    assert (gate.key, gate.gate, gate.version, gate.in_use) == ("handler:app:job", 0, 1, 2)
