-- Delete the DEAD tasks of :queue that match the filter.
DELETE FROM {schema}.task
WHERE queue = :queue AND status = 'DEAD'
  AND (:error_type::text IS NULL OR error_type = :error_type)
  AND (:handler_ref::text IS NULL OR handler_ref = :handler_ref)
  AND (:after::timestamptz IS NULL OR dead_lettered_at >= :after)
  AND (:before::timestamptz IS NULL OR dead_lettered_at < :before)
