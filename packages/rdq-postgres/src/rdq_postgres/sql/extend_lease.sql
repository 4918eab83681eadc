-- Extend the lease of task :id held with :token to now() + :lease_us microseconds; found tells
-- a stale token (the task exists) from a missing task. A lapsed lease is extended only into a
-- free slot of every concurrency limit of its keys (slots_free, migration 0010): no row back
-- then, as for a stale token. lower_floor(): the new lease end is when the task is due again
-- if its holder stops (migration 0014); lower_lease_floor(): a lease that ends before the
-- queue's lease floor lowers it (migration 0017).
WITH ext AS (
    UPDATE {schema}.task AS t
    SET lease_expires_at = now() + :lease_us::bigint * interval '1 microsecond'
    WHERE t.id = :id AND t.token = :token AND t.status = 'IN_FLIGHT'
      AND CASE WHEN t.lease_expires_at > now() THEN true
          ELSE {schema}.slots_free(t.queue, t.handler_ref, t.keys) END
    RETURNING t.queue, t.lease_expires_at
)
SELECT (SELECT lease_expires_at FROM ext) AS lease_expires_at,
       (SELECT {schema}.lower_floor(queue, lease_expires_at) FROM ext) AS lowered,
       (SELECT {schema}.lower_lease_floor(queue, lease_expires_at) FROM ext) AS lease_lowered,
       EXISTS (SELECT 1 FROM {schema}.task WHERE id = :id) AS found
