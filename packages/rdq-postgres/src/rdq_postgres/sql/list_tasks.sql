-- One page of the {status} tasks of :queue ordered by ({at}, id) (the DLQ's pages are those of
-- DEAD by dead_lettered_at); {keyset} is empty on the first page and task_keyset.part after a
-- cursor. NULL filters match anything; {at} in [:after, :before); :with_attempts: the
-- attempt history, or [].
SELECT id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
       CASE WHEN :with_attempts THEN attempts ELSE '[]'::json END AS attempts, created_at,
       next_attempt_at, lease_expires_at, completed_at, dead_lettered_at, retry,
       priority, keys, claimed_by, claimed_at, cancelled_at, format_version, quarantine, extra,
       {at} AS listed_at
FROM {schema}.task
WHERE queue = :queue AND status = '{status}'
  {keyset}
  AND (:error_type::text IS NULL OR error_type = :error_type)
  AND (:handler_ref::text IS NULL OR handler_ref = :handler_ref)
  AND (:after::timestamptz IS NULL OR {at} >= :after)
  AND (:before::timestamptz IS NULL OR {at} < :before)
ORDER BY {at}, id
LIMIT :limit
