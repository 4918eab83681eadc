-- The due tasks of one priority that no control held back, oldest due first.
SELECT id, status, attempt_count, lease_expires_at, claimed_at, claimed_by FROM task
WHERE queue = :queue AND priority = :priority AND claim_at <= :now
ORDER BY claim_at, id
LIMIT :limit
