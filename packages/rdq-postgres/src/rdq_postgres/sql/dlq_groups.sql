-- The DEAD tasks of :queue grouped by handler and last error type (task_dlq_idx).
SELECT handler_ref, error_type, count(*) AS n,
       min(dead_lettered_at) AS first_at, max(dead_lettered_at) AS last_at
FROM {schema}.task
WHERE queue = :queue AND status = 'DEAD'
GROUP BY handler_ref, error_type
