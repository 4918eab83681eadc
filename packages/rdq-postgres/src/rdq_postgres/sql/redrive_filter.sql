-- Return the DEAD tasks of :queue that match the filter to PENDING, due now, history kept.
WITH upd AS (
    UPDATE {schema}.task
    SET status = 'PENDING', next_attempt_at = now(), attempt_count = 0,
        redrive_count = redrive_count + 1, dead_lettered_at = NULL
    WHERE queue = :queue AND status = 'DEAD'
      {dlq_filter}
    RETURNING 1
)
-- lower_floor(): the tasks are due (migration 0014)
SELECT count(*) AS n, {schema}.lower_floor(:queue, now()) AS lowered FROM upd
