-- Return the DEAD tasks of :queue that match the filter to PENDING, due now, history kept.
WITH upd AS (
    UPDATE {schema}.task
    SET status = 'PENDING', next_attempt_at = now(), attempt_count = 0,
        redrive_count = redrive_count + 1, dead_lettered_at = NULL
    WHERE queue = :queue AND status = 'DEAD'
      AND (:error_type::text IS NULL OR error_type = :error_type)
      AND (:handler_ref::text IS NULL OR handler_ref = :handler_ref)
      AND (:after::timestamptz IS NULL OR dead_lettered_at >= :after)
      AND (:before::timestamptz IS NULL OR dead_lettered_at < :before)
    RETURNING 1
)
SELECT count(*) AS n FROM upd
