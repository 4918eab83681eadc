-- A claim in a queue's own order: the next due tasks of group :grp and one priority, held or
-- not, after a keyset position (task_group). Columns as claim_scan.sql's, then the priority.
SELECT id, status, attempt_count, lease_expires_at, claimed_at, claimed_by, due_at,
    handler_ref, keys, priority
FROM task
WHERE queue = :queue AND grp = :grp AND priority = :priority AND due_at <= :now
    AND (due_at, id) > (:after_at, :after_id) AND grp IS NOT NULL AND due_at IS NOT NULL
ORDER BY due_at, id
LIMIT :limit
