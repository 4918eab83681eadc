-- The tasks of one priority held under :key, in claim order after a keyset position.
SELECT id, status, attempt_count, lease_expires_at, claimed_at, claimed_by, due_at,
    handler_ref, keys
FROM task
WHERE queue = :queue AND held = :key AND priority = :priority AND due_at <= :now
    AND (due_at, id) > (:after_at, :after_id)
ORDER BY due_at, id
LIMIT :limit
