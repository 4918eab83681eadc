-- Prototype (bench/e2e/combined_experiment.py): record the previous batch's completions
-- ($1 ids, $2 tokens, $3 attempt records, $4 error types; fenced per task like
-- complete_many) and claim the next batch of queue $5 ($6 tasks, lease $7) in one statement
-- (schema version 3: the claim by priority, as rdq_postgres/sql/claim.sql).
-- The claimed rows come back as rows; one extra row with a NULL id carries the ids completed.
-- The claim skips the ids being completed (one statement must not update a row twice).
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::json[], $4::text[])
        AS i(id, token, attempt, error_type)
),
upd AS (
    UPDATE rdq.task AS t
    SET status = 'SUCCEEDED', completed_at = now(), lease_expires_at = NULL, claimed_at = NULL,
        claimed_by = NULL, token = NULL, attempts = rdq.append_attempt(t.attempts, i.attempt),
        attempt_count = t.attempt_count + 1, error_type = i.error_type
    FROM input AS i
    WHERE t.id = i.id AND t.token = i.token AND t.status = 'IN_FLIGHT'
    RETURNING t.id
),
due AS (
    SELECT id, due_at FROM rdq.task
    WHERE priority = ANY ('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[])
      AND queue = $5 AND status IN ('PENDING', 'IN_FLIGHT') AND due_at <= now()
      AND id <> ALL($1::text[])
    ORDER BY priority DESC, due_at LIMIT $6
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE rdq.task AS t
    SET status = 'IN_FLIGHT', token = gen_random_uuid()::text, claimed_at = now(),
        lease_expires_at = now() + $7::interval,
        attempt_count = t.attempt_count + CASE WHEN t.status = 'IN_FLIGHT' THEN 1 ELSE 0 END
    FROM due WHERE t.id = due.id
    RETURNING t.id, t.queue, t.handler_ref, t.payload, t.headers, t.status, t.attempt_count,
          t.redrive_count, t.attempts, t.created_at, t.next_attempt_at, t.lease_expires_at,
          t.completed_at, t.dead_lettered_at, t.retry, t.priority, t.claimed_by, t.claimed_at,
          t.cancelled_at, t.format_version, t.extra, t.quarantine, t.token,
          due.due_at AS claimed_due_at
)
SELECT c.*, NULL::text[] AS done FROM claimed AS c
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, (SELECT array_agg(id) FROM upd)
