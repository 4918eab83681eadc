-- Success: append :attempt (error type :error_type), SUCCEEDED now; fenced on :token.
WITH upd AS (
    UPDATE {schema}.task
    SET status = 'SUCCEEDED',
        completed_at = now(),
        lease_expires_at = NULL,
        claimed_at = NULL,
        claimed_by = NULL,
        token = NULL,
        -- (task_json_check keeps attempts an array; the CASE keeps a database without it working)
        attempts = CASE WHEN json_typeof(attempts) = 'array'
            THEN {schema}.append_attempt(attempts, :attempt::json)
            ELSE json_build_array(:attempt::json) END,
        quarantine = CASE WHEN json_typeof(attempts) = 'array'
            THEN quarantine ELSE {schema}.quarantine_add(quarantine, 'attempts', attempts) END,
        attempt_count = attempt_count + 1,
        error_type = :error_type
    WHERE id = :id AND token = :token AND status = 'IN_FLIGHT'
    RETURNING queue
)
SELECT EXISTS (SELECT 1 FROM upd) AS done,
       EXISTS (SELECT 1 FROM {schema}.task WHERE id = :id) AS found,
       (SELECT queue FROM upd) AS queue
