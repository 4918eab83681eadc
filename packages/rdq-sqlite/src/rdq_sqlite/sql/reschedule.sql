UPDATE task SET
    status = 'PENDING',
    next_attempt_at = :next_at,
    lease_expires_at = NULL,
    token = NULL,
    claimed_by = NULL,
    claimed_at = NULL,
    attempt_count = attempt_count + 1,
    attempts = {append_attempt},
    last_error_type = :error_type,
    held = NULL
WHERE id = :id AND status = 'IN_FLIGHT' AND token = :token
RETURNING queue
