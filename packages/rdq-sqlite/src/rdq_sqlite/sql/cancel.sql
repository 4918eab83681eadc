UPDATE task SET
    status = 'CANCELLED',
    cancelled_at = :now,
    lease_expires_at = NULL,
    token = NULL,
    claimed_by = NULL,
    claimed_at = NULL
WHERE queue = :queue AND status IN ('PENDING', 'IN_FLIGHT')
    AND id IN (SELECT value FROM json_each(:ids))
