-- Return the DEAD tasks of queue $1 among ids $2 to PENDING, due now, history kept.
WITH upd AS (
    UPDATE {schema}.task
    SET status = 'PENDING', next_attempt_at = now(), attempt_count = 0,
        redrive_count = redrive_count + 1, dead_lettered_at = NULL
    WHERE queue = $1 AND status = 'DEAD' AND id = ANY($2::text[])
    RETURNING 1
)
SELECT count(*) AS n FROM upd
