-- The DLQ page of queue $1 after ($8, $9): keyset pagination on (dead_lettered_at, id).
SELECT id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
       CASE WHEN $6 THEN attempts ELSE '[]'::json END AS attempts, created_at,
       next_attempt_at, lease_expires_at, completed_at, dead_lettered_at, retry,
       priority, claimed_by, claimed_at, cancelled_at, format_version, quarantine, extra
FROM {schema}.task
WHERE queue = $1 AND status = 'DEAD'
  AND (dead_lettered_at, id) > ($8::timestamptz, $9::text)
  AND ($2::text IS NULL OR error_type = $2)
  AND ($3::text IS NULL OR handler_ref = $3)
  AND ($4::timestamptz IS NULL OR dead_lettered_at >= $4)
  AND ($5::timestamptz IS NULL OR dead_lettered_at < $5)
ORDER BY dead_lettered_at, id
LIMIT $7
