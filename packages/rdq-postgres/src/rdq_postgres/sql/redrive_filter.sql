-- Return the DEAD tasks of queue $1 matching filters $2-$5 to PENDING, due now.
WITH upd AS (
    UPDATE {schema}.task
    SET status = 'PENDING', next_attempt_at = now(), attempt_count = 0,
        redrive_count = redrive_count + 1, dead_lettered_at = NULL
    WHERE queue = $1 AND status = 'DEAD'
      AND ($2::text IS NULL OR error_type = $2)
  AND ($3::text IS NULL OR handler_ref = $3)
  AND ($4::timestamptz IS NULL OR dead_lettered_at >= $4)
  AND ($5::timestamptz IS NULL OR dead_lettered_at < $5)
    RETURNING 1
)
SELECT count(*) AS n FROM upd
