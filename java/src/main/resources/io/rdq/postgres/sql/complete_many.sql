-- complete for many claims at once: item k is (:ids[k], :tokens[k], :attempts[k], its error
-- type :error_types[k]); each row is fenced on its own token. done lists the ids completed,
-- found the ids that exist (an id not done is StaleClaim if found, else NotFound).
WITH input AS (
    SELECT *
    FROM unnest(:ids::text[], :tokens::text[], :attempts::text[]::json[], :error_types::text[])
        AS i(id, token, attempt, error_type)
),
upd AS (
    UPDATE {schema}.task AS t
    SET status = 'SUCCEEDED',
        completed_at = now(),
        lease_expires_at = NULL,
        claimed_at = NULL,
        claimed_by = NULL,
        token = NULL,
        attempts = CASE WHEN json_typeof(t.attempts) = 'array'
            THEN {schema}.append_attempt(t.attempts, i.attempt) ELSE json_build_array(i.attempt)
        END,
        quarantine = CASE WHEN json_typeof(t.attempts) = 'array'
            THEN t.quarantine ELSE {schema}.quarantine_add(t.quarantine, 'attempts', t.attempts)
        END,
        attempt_count = t.attempt_count + 1,
        error_type = i.error_type
    FROM input AS i
    WHERE t.id = i.id AND t.token = i.token AND t.status = 'IN_FLIGHT'
    RETURNING t.id
)
SELECT ARRAY(SELECT id FROM upd) AS done,
       ARRAY(SELECT id FROM {schema}.task WHERE id = ANY(:ids::text[])) AS found
