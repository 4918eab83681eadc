-- complete for many claims at once: item k is (id $1[k], token $2[k], attempt $3[k], its error
-- type $4[k]); each row is fenced on its own token. done lists the ids completed, found the
-- ids that exist, when any id was not done (such an id is StaleClaim if found, else NotFound).
WITH input AS (
    SELECT *
    FROM unnest($1::text[], $2::text[], $3::json[], $4::text[])
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
SELECT (SELECT array_agg(id) FROM upd) AS done,
       -- which ids exist is asked only when some item was not completed (the common batch
       -- completes them all and skips these lookups)
       CASE WHEN (SELECT count(*) FROM upd) < cardinality($1::text[]) THEN
           (SELECT array_agg(id) FROM {schema}.task WHERE id = ANY($1::text[]))
       END AS found
