-- Claim up to :limit due tasks of :queue for a lease of :lease_us microseconds (an integer: an
-- elapsed time, never a calendar day) on behalf of worker :worker_id: highest priority first,
-- oldest due first within a priority; claimed_rank is each claim's place in that order.
-- Due: PENDING with next_attempt_at <= now(), or IN_FLIGHT with lease_expires_at <= now()
-- (a lost lease, reclaimed with a LEASE_EXPIRED attempt record naming its holder). now() is
-- the database clock (the transaction start: run it in autocommit). Locked rows are skipped,
-- never waited on. The statement is claim_due()'s (migrations 0007-0009), which plans it once per
-- connection: planned at every claim, it took as long to plan as to run.
-- For a queue that a control restricts (a pause, a gate, a concurrency or rate limit, fair
-- shares, aging) it raises SQLSTATE RQ423 before it reads a task and the claim is
-- claim_controlled.sql's; for every other queue that check costs one index probe.
SELECT id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count, attempts,
       created_at, next_attempt_at, lease_expires_at, completed_at, dead_lettered_at, retry,
       priority, keys, claimed_by, claimed_at, cancelled_at, format_version, extra, quarantine,
       token, claimed_rank
FROM {schema}.claim_due(:queue, :limit, :lease_us, :worker_id)
