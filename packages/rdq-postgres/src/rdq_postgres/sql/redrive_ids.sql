-- Return the DEAD tasks of :queue among :ids to PENDING, due now, history kept.
WITH upd AS (
    UPDATE {schema}.task
    SET status = 'PENDING', next_attempt_at = now(), attempt_count = 0,
        redrive_count = redrive_count + 1, dead_lettered_at = NULL
    WHERE queue = :queue AND status = 'DEAD' AND id = ANY(:ids::text[])
    RETURNING 1
)
SELECT count(*) AS n FROM upd
