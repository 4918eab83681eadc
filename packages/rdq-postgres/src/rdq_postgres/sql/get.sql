-- One task with its full history.
SELECT id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
       attempts, created_at, next_attempt_at, lease_expires_at, completed_at,
       dead_lettered_at, retry, priority, keys, claimed_by, claimed_at, cancelled_at, format_version,
       quarantine, extra
FROM {schema}.task
WHERE id = :id
