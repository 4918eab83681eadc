-- By id (the unary + keeps the planner on the primary key, not on a scan of the queue).
UPDATE task SET
    status = 'CANCELLED',
    cancelled_at = :now,
    lease_expires_at = NULL,
    token = NULL,
    claimed_by = NULL,
    claimed_at = NULL
WHERE id IN (SELECT value FROM json_each(:ids))
    AND +queue = :queue AND +status IN ('PENDING', 'IN_FLIGHT')
