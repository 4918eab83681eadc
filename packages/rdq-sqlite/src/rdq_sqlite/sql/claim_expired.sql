-- Reclaim a task whose lease lapsed: record the lost lease as an attempt, in the same step.
UPDATE task SET
    token = lower(hex(randomblob(16))),
    lease_expires_at = :expires,
    claimed_at = :now,
    claimed_by = :worker_id,
    attempt_count = attempt_count + 1,
    attempts = {append_attempt},
    last_error_type = 'LeaseExpired',
    held = NULL
WHERE id = :id
RETURNING token, {columns}
