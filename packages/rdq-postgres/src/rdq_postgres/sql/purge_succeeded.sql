-- Delete the SUCCEEDED tasks of :queue completed before :older_than and the CANCELLED ones
-- cancelled before it (each from its partial index).
WITH succeeded AS (
    DELETE FROM {schema}.task
    WHERE queue = :queue AND status = 'SUCCEEDED' AND completed_at < :older_than::timestamptz
    RETURNING 1
),
cancelled AS (
    DELETE FROM {schema}.task
    WHERE queue = :queue AND status = 'CANCELLED' AND cancelled_at < :older_than::timestamptz
    RETURNING 1
)
SELECT (SELECT count(*) FROM succeeded) + (SELECT count(*) FROM cancelled) AS n
