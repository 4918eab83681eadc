-- The due tasks of one priority, oldest due first.
SELECT id, status, attempt_count, lease_expires_at, claimed_at, claimed_by FROM task
WHERE queue = :queue AND priority = :priority AND due_at <= :now
ORDER BY due_at, id
LIMIT :limit
