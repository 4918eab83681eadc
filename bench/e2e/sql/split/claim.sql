-- Claim up to :limit due tasks of :queue for :lease_us microseconds on behalf of :worker_id:
-- rdq's claim.sql over the split layout's claim_due() (claim_due.sql).
SELECT id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count, attempts,
       created_at, next_attempt_at, lease_expires_at, completed_at, dead_lettered_at, retry,
       priority, keys, claimed_by, claimed_at, cancelled_at, format_version, extra, quarantine,
       token, claimed_rank
FROM split.claim_due(:queue, :limit, :lease_us, :worker_id)
