-- Extend the lease of task :id held with :token to now() + :lease_us microseconds; found tells
-- a stale token (the task exists) from a missing task.
WITH ext AS (
    UPDATE {schema}.task
    SET lease_expires_at = now() + :lease_us::bigint * interval '1 microsecond'
    WHERE id = :id AND token = :token AND status = 'IN_FLIGHT'
    RETURNING lease_expires_at
)
SELECT (SELECT lease_expires_at FROM ext) AS lease_expires_at,
       EXISTS (SELECT 1 FROM {schema}.task WHERE id = :id) AS found
