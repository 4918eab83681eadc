-- The claim of :queue when a control restricts it (claim.sql raised RQ423 for it, now or
-- before): claim_controlled() takes up to :limit due tasks that every control of their keys
-- lets through (see migration 0005), with claim.sql's lease, token and LEASE_EXPIRED record
-- and the same columns, in the order the queue's own control asks for (fair shares, priority
-- aging: migration 0006), each claim's place in it in claimed_rank. `controlled` says whether
-- a control restricts the queue or orders its claims still (when none does, claim.sql is the
-- cheaper claim again); when nothing was claimed, the one row holds it and NULL in every other
-- column.
SELECT c.controlled, (h.claimed).id, (h.claimed).queue, (h.claimed).handler_ref,
       (h.claimed).payload, (h.claimed).headers, (h.claimed).status, (h.claimed).attempt_count,
       (h.claimed).redrive_count, (h.claimed).attempts, (h.claimed).created_at,
       (h.claimed).next_attempt_at, (h.claimed).lease_expires_at, (h.claimed).completed_at,
       (h.claimed).dead_lettered_at, (h.claimed).retry, (h.claimed).priority, (h.claimed).keys,
       (h.claimed).claimed_by, (h.claimed).claimed_at, (h.claimed).cancelled_at,
       (h.claimed).format_version, (h.claimed).extra, (h.claimed).quarantine, (h.claimed).token,
       h.claimed_due_at, h.claimed_rank
FROM (
    SELECT EXISTS (
        SELECT FROM {schema}.control AS k
        WHERE k.queue = :queue
          AND (k.paused OR k.gate IS NOT NULL OR k.concurrency IS NOT NULL OR k.rate IS NOT NULL
               OR k.fair IS NOT NULL OR k.aging IS NOT NULL)
    ) AS controlled
) AS c
LEFT JOIN LATERAL {schema}.claim_controlled(:queue, :limit, :lease_us, :worker_id) AS h ON true
