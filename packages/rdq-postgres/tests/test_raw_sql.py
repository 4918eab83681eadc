"""The cross-language contract: a worker with nothing but SQL claims and resolves tasks.

The statements below are the ones ``docs/postgres-schema.md`` documents; they are written out
here on purpose (not loaded from the plugin), so a change to the schema that breaks foreign
workers breaks this test."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

from rdq.spi import Envelope, Outcome, Status
from rdq_postgres import PostgresStorage

CLAIM = """
WITH due AS (
    SELECT id FROM {s}.task
    WHERE queue = $1 AND status IN ('PENDING', 'IN_FLIGHT') AND due_at <= now()
    ORDER BY due_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE {s}.task AS t
SET status = 'IN_FLIGHT',
    token = gen_random_uuid()::text,
    claimed_at = now(),
    lease_expires_at = now() + interval '30 seconds',
    attempt_count = t.attempt_count + CASE WHEN t.status = 'IN_FLIGHT' THEN 1 ELSE 0 END,
    attempts = CASE WHEN t.status = 'IN_FLIGHT'
        THEN {s}.append_attempt(t.attempts, json_build_object(
            'number', t.attempt_count + 1, 'outcome', 'LEASE_EXPIRED',
            'error_type', 'LeaseExpired', 'finished_at', {s}.rfc3339(now())))
        ELSE t.attempts END
FROM due
WHERE t.id = due.id
RETURNING t.id, t.token, t.payload::text AS payload, t.attempt_count
"""

COMPLETE = """
UPDATE {s}.task
SET status = 'SUCCEEDED', completed_at = now(), lease_expires_at = NULL, claimed_at = NULL,
    token = NULL, attempt_count = attempt_count + 1, error_type = NULL,
    attempts = {s}.append_attempt(attempts, json_build_object(
        'number', attempt_count + 1, 'outcome', 'SUCCEEDED',
        'started_at', {s}.rfc3339(claimed_at), 'finished_at', {s}.rfc3339(now()),
        'worker_id', 'sql-worker'))
WHERE id = $1 AND token = $2 AND status = 'IN_FLIGHT'
"""

ENQUEUE = """
INSERT INTO {s}.task (id, queue, handler_ref, payload, status, next_attempt_at)
VALUES ($1, $2, $3, $4::json, 'PENDING', now())
ON CONFLICT (id) DO NOTHING
"""


@pytest.mark.asyncio
async def test_a_plain_sql_worker_claims_and_completes(
    storage: PostgresStorage, postgres_url: str, schema: str
) -> None:
    s = f'"{schema}"'
    await storage.enqueue(
        Envelope(id="from-python", queue="mixed", handler_ref="app:job", payload={"n": 1})
    )
    conn = await asyncpg.connect(postgres_url)
    try:
        row = await conn.fetchrow(CLAIM.format(s=s), "mixed")
        assert row is not None
        assert row["id"] == "from-python"
        assert row["payload"] == '{"n":1}'
        assert await conn.fetchrow(CLAIM.format(s=s), "mixed") is None  # nothing else due
        assert await conn.execute(COMPLETE.format(s=s), row["id"], "not-the-token") == "UPDATE 0"
        assert await conn.execute(COMPLETE.format(s=s), row["id"], row["token"]) == "UPDATE 1"
        # ...and a task admitted with SQL is claimed by the Python store.
        await conn.execute(ENQUEUE.format(s=s), "from-sql", "mixed", "app:job", '{"n": 2}')
    finally:
        await conn.close()

    done = await storage.get("from-python")
    assert done.status == Status.SUCCEEDED
    assert done.completed_at is not None
    assert [(a.number, a.outcome, a.worker_id) for a in done.attempts] == [
        (1, Outcome.SUCCEEDED, "sql-worker")
    ]
    assert done.attempt_count == 1

    claimed = await storage.claim_due("mixed", 10, timedelta(seconds=5))
    assert [(c.task.id, c.task.payload) for c in claimed] == [("from-sql", {"n": 2})]
