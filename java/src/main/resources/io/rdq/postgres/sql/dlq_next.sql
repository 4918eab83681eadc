-- The DLQ page of :queue after the cursor (:cursor_at, :cursor_id): keyset pagination on
-- (dead_lettered_at, id); NULL filters match anything.
SELECT id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
       CASE WHEN :with_attempts THEN attempts ELSE '[]'::json END AS attempts, created_at,
       next_attempt_at, lease_expires_at, completed_at, dead_lettered_at, retry,
       priority, claimed_by, claimed_at, cancelled_at, format_version, extra, quarantine
FROM {schema}.task
WHERE queue = :queue AND status = 'DEAD'
  AND (dead_lettered_at, id) > (:cursor_at::timestamptz, :cursor_id::text)
  AND (:error_type::text IS NULL OR error_type = :error_type)
  AND (:handler_ref::text IS NULL OR handler_ref = :handler_ref)
  AND (:after::timestamptz IS NULL OR dead_lettered_at >= :after)
  AND (:before::timestamptz IS NULL OR dead_lettered_at < :before)
ORDER BY dead_lettered_at, id
LIMIT :limit
