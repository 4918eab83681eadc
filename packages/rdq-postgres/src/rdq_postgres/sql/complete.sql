-- Success: append attempt $3 (error type $4), SUCCEEDED now; fenced on token $2.
WITH upd AS (
    UPDATE {schema}.task
    SET status = 'SUCCEEDED',
        completed_at = now(),
        lease_expires_at = NULL,
        claimed_at = NULL,
        claimed_by = NULL,
        token = NULL,
        attempts = CASE WHEN json_typeof(attempts) = 'array'
            THEN {schema}.append_attempt(attempts, $3::json) ELSE json_build_array($3::json) END,
        quarantine = CASE WHEN json_typeof(attempts) = 'array'
            THEN quarantine ELSE {schema}.quarantine_add(quarantine, 'attempts', attempts) END,
        attempt_count = attempt_count + 1,
        error_type = $4
    WHERE id = $1 AND token = $2 AND status = 'IN_FLIGHT'
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM upd) AS done,
       EXISTS (SELECT 1 FROM {schema}.task WHERE id = $1) AS found
