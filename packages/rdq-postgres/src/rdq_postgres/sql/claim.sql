-- Claim up to :limit due tasks of :queue for a lease of :lease_us microseconds (an integer: an
-- elapsed time, never a calendar day) on behalf of worker :worker_id: highest priority first,
-- oldest due first within a priority.
-- Due: PENDING with next_attempt_at <= now(), or IN_FLIGHT with lease_expires_at <= now()
-- (a lost lease, reclaimed with a LEASE_EXPIRED attempt record naming its holder). now() is
-- the database clock (the transaction start: run it in autocommit). Locked rows are skipped,
-- never waited on. `priority = ANY (every priority)` lets task_claim_priority_idx serve the
-- ORDER BY in one index scan that reads due entries only.
-- unrestricted() is a one-time filter, evaluated before the scan: for a queue that a control
-- restricts (a pause, a gate, a concurrency or rate limit) it raises SQLSTATE RQ423 and the
-- claim is claim_controlled.sql's; for every other queue it costs one index probe.
WITH due AS (
    SELECT id, due_at
    FROM {schema}.task
    WHERE priority = ANY ('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[])
      AND queue = :queue
      AND status IN ('PENDING', 'IN_FLIGHT')
      AND due_at <= now()
      AND {schema}.unrestricted(:queue)
    ORDER BY priority DESC, due_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.task AS t
SET status = 'IN_FLIGHT',
    token = gen_random_uuid()::text,
    claimed_at = now(),
    claimed_by = :worker_id,
    lease_expires_at = now() + :lease_us::bigint * interval '1 microsecond',
    attempt_count = t.attempt_count + CASE WHEN t.status = 'IN_FLIGHT' THEN 1 ELSE 0 END,
    error_type = CASE WHEN t.status = 'IN_FLIGHT' THEN 'LeaseExpired' ELSE t.error_type END,
    attempts = CASE
        WHEN t.status = 'IN_FLIGHT' THEN {schema}.append_attempt(CASE
            WHEN json_typeof(t.attempts) = 'array' THEN t.attempts ELSE '[]' END,
            json_build_object(
            'number', t.attempt_count + 1,
            'outcome', 'LEASE_EXPIRED',
            'error_type', 'LeaseExpired',
            'error_message', 'lease expired at ' || {schema}.rfc3339(t.lease_expires_at)
                || ' before the attempt was resolved',
            'started_at', {schema}.rfc3339(t.claimed_at),
            'finished_at', {schema}.rfc3339(now()),
            'worker_id', t.claimed_by
        ))
        ELSE t.attempts
    END,
    quarantine = CASE WHEN t.status = 'IN_FLIGHT' AND json_typeof(t.attempts) <> 'array'
        THEN {schema}.quarantine_add(t.quarantine, 'attempts', t.attempts) ELSE t.quarantine END
FROM due
WHERE t.id = due.id
RETURNING t.id, t.queue, t.handler_ref, t.payload, t.headers, t.status, t.attempt_count,
          t.redrive_count, t.attempts, t.created_at, t.next_attempt_at, t.lease_expires_at,
          t.completed_at, t.dead_lettered_at, t.retry, t.priority, t.keys, t.claimed_by, t.claimed_at,
          t.cancelled_at, t.format_version, t.extra, t.quarantine, t.token,
          due.due_at AS claimed_due_at
