-- Proposed for the Postgres plugin (an optional "resolve many" capability): complete many
-- claimed tasks in one statement, each still fenced on its own claim token.
-- $1 ids, $2 tokens, $3 attempt records (json), $4 error types. One row per input:
-- done = completed now; found = the task exists (done false + found true = StaleClaim).
WITH input AS (
    SELECT *
    FROM unnest($1::text[], $2::text[], $3::json[], $4::text[]) AS i(id, token, attempt, error_type)
),
upd AS (
    UPDATE rdq.task AS t
    SET status = 'SUCCEEDED',
        completed_at = now(),
        lease_expires_at = NULL,
        claimed_at = NULL,
        token = NULL,
        attempts = rdq.append_attempt(t.attempts, i.attempt),
        attempt_count = t.attempt_count + 1,
        error_type = i.error_type
    FROM input AS i
    WHERE t.id = i.id AND t.token = i.token AND t.status = 'IN_FLIGHT'
    RETURNING t.id
)
SELECT i.id,
       EXISTS (SELECT 1 FROM upd WHERE upd.id = i.id) AS done,
       EXISTS (SELECT 1 FROM rdq.task AS x WHERE x.id = i.id) AS found
FROM input AS i
