-- Cancel the PENDING or IN_FLIGHT tasks of :queue among :ids: the claim token goes with the
-- lease, so a holder's next fenced statement changes nothing.
UPDATE {schema}.task
SET status = 'CANCELLED',
    cancelled_at = now(),
    lease_expires_at = NULL,
    claimed_at = NULL,
    claimed_by = NULL,
    token = NULL
WHERE queue = :queue AND id = ANY(:ids::text[]) AND status IN ('PENDING', 'IN_FLIGHT')
