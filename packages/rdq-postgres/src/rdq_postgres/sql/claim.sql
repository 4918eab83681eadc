-- Claim up to :limit due tasks of :queue for a lease of :lease_us microseconds (an integer: an
-- elapsed time, never a calendar day) on behalf of worker :worker_id: highest priority first,
-- oldest due first within a priority; claimed_rank is each claim's place in that order.
-- Due: PENDING with next_attempt_at <= now(), or IN_FLIGHT with lease_expires_at <= now()
-- (a lost lease, reclaimed with a LEASE_EXPIRED attempt record naming its holder). now() is
-- the database clock (the transaction start: run it in autocommit). Locked rows are skipped,
-- never waited on. The statement is claim_due()'s (migration 0007), which plans it once per
-- connection: planned at every claim, it took as long to plan as to run.
-- For a queue that a control restricts (a pause, a gate, a concurrency or rate limit, fair
-- shares, aging) it raises SQLSTATE RQ423 before it reads a task and the claim is
-- claim_controlled.sql's; for every other queue that check costs one index probe.
SELECT (c.claimed).id, (c.claimed).queue, (c.claimed).handler_ref, (c.claimed).payload,
       (c.claimed).headers, (c.claimed).status, (c.claimed).attempt_count,
       (c.claimed).redrive_count, (c.claimed).attempts, (c.claimed).created_at,
       (c.claimed).next_attempt_at, (c.claimed).lease_expires_at, (c.claimed).completed_at,
       (c.claimed).dead_lettered_at, (c.claimed).retry, (c.claimed).priority, (c.claimed).keys,
       (c.claimed).claimed_by, (c.claimed).claimed_at, (c.claimed).cancelled_at,
       (c.claimed).format_version, (c.claimed).extra, (c.claimed).quarantine, (c.claimed).token,
       c.claimed_rank
FROM {schema}.claim_due(:queue, :limit, :lease_us, :worker_id) AS c
