-- Claim up to :limit due tasks of :queue for a lease of :lease_us microseconds, oldest due
-- first. Due: PENDING with next_attempt_at <= now(), or IN_FLIGHT with lease_expires_at <=
-- now() (a lost lease, reclaimed with a LEASE_EXPIRED attempt record). now() is the database
-- clock (run in autocommit). Locked rows are skipped, never waited on.
WITH due AS (
    SELECT id, due_at
    FROM {schema}.task
    WHERE queue = :queue
      AND status IN ('PENDING', 'IN_FLIGHT')
      AND due_at <= now()
    ORDER BY due_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.task AS t
SET status = 'IN_FLIGHT',
    token = gen_random_uuid()::text,
    claimed_at = now(),
    lease_expires_at = now() + :lease_us * interval '1 microsecond',
    attempt_count = t.attempt_count + CASE WHEN t.status = 'IN_FLIGHT' THEN 1 ELSE 0 END,
    error_type = CASE WHEN t.status = 'IN_FLIGHT' THEN 'LeaseExpired' ELSE t.error_type END,
    attempts = CASE
        WHEN t.status = 'IN_FLIGHT' THEN {schema}.append_attempt(t.attempts, json_build_object(
            'number', t.attempt_count + 1,
            'outcome', 'LEASE_EXPIRED',
            'error_type', 'LeaseExpired',
            'error_message', 'lease expired at ' || {schema}.rfc3339(t.lease_expires_at)
                || ' before the attempt was resolved',
            'started_at', {schema}.rfc3339(t.claimed_at),
            'finished_at', {schema}.rfc3339(now()),
            'worker_id', NULL
        ))
        ELSE t.attempts
    END
FROM due
WHERE t.id = due.id
RETURNING t.id, t.queue, t.handler_ref, t.payload, t.headers, t.status, t.attempt_count,
          t.redrive_count, t.attempts, t.created_at, t.next_attempt_at, t.lease_expires_at,
          t.completed_at, t.dead_lettered_at, t.retry, t.format_version, t.extra, t.token,
          due.due_at AS claimed_due_at
