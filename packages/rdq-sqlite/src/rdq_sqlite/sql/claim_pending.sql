-- Claim PENDING tasks: a fresh random token each, the lease and the claimant.
UPDATE task SET
    status = 'IN_FLIGHT',
    token = lower(hex(randomblob(16))),
    lease_expires_at = :expires,
    claimed_at = :now,
    claimed_by = :worker_id,
    held = NULL
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING token, {columns}
