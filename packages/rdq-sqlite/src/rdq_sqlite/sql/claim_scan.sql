-- A claim through controls: the next due tasks of one priority that no control held back, after
-- a keyset position, with what the controls need (handler and keys).
SELECT id, status, attempt_count, lease_expires_at, claimed_at, claimed_by, claim_at,
    handler_ref, keys
FROM task
WHERE queue = :queue AND priority = :priority AND claim_at <= :now
    AND (claim_at, id) > (:after_at, :after_id)
ORDER BY claim_at, id
LIMIT :limit
