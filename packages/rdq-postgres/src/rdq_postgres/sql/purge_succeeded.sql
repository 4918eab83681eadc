-- Delete the SUCCEEDED tasks of queue $1 completed before $2 and the CANCELLED ones cancelled
-- before it (each from its partial index).
WITH succeeded AS (
    DELETE FROM {schema}.task
    WHERE queue = $1 AND status = 'SUCCEEDED' AND completed_at < $2
    RETURNING 1
),
cancelled AS (
    DELETE FROM {schema}.task
    WHERE queue = $1 AND status = 'CANCELLED' AND cancelled_at < $2
    RETURNING 1
)
SELECT (SELECT count(*) FROM succeeded) + (SELECT count(*) FROM cancelled) AS n
