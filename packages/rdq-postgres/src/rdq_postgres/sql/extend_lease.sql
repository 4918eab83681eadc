-- Extend the lease of task $1 held with token $2 to now() + $3 microseconds.
WITH ext AS (
    UPDATE {schema}.task
    SET lease_expires_at = now() + $3::bigint * interval '1 microsecond'
    WHERE id = $1 AND token = $2 AND status = 'IN_FLIGHT'
    RETURNING lease_expires_at
)
SELECT (SELECT lease_expires_at FROM ext) AS lease_expires_at,
       EXISTS (SELECT 1 FROM {schema}.task WHERE id = $1) AS found
