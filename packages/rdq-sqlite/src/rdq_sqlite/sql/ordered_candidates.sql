-- Every due task of :queue, held or not, for a claim in the order the queue's own control
-- asks for (fair shares, priority aging): the claim ranks them in Python (rdq.spi.ClaimOrder),
-- so it reads them all — the claimable ones through task_claim, the held ones through
-- task_held. Columns as claim_scan.sql's, then the priority.
SELECT id, status, attempt_count, lease_expires_at, claimed_at, claimed_by, claim_at,
    handler_ref, keys, priority
FROM task
WHERE queue = :queue AND claim_at <= :now
UNION ALL
SELECT id, status, attempt_count, lease_expires_at, claimed_at, claimed_by, due_at,
    handler_ref, keys, priority
FROM task
WHERE queue = :queue AND held IS NOT NULL AND due_at IS NOT NULL AND due_at <= :now
