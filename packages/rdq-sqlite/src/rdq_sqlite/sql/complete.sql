UPDATE task SET
    status = 'SUCCEEDED',
    completed_at = :now,
    lease_expires_at = NULL,
    token = NULL,
    claimed_by = NULL,
    claimed_at = NULL,
    attempt_count = attempt_count + 1,
    attempts = {append_attempt},
    last_error_type = :error_type
WHERE id = :id AND status = 'IN_FLIGHT' AND token = :token
RETURNING queue
