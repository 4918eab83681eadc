-- One page of audit entries, newest first (time, then id, descending); {keyset} is empty on
-- the first page and audit_keyset.part after a cursor. NULL filters match anything; time in
-- [:after, :before).
SELECT id, time, actor, action, queue, selector, count, reason, error
FROM {schema}.audit
WHERE (:queue::text IS NULL OR queue = :queue)
  {keyset}
  AND (:action::text IS NULL OR action = :action)
  AND (:actor::text IS NULL OR actor = :actor)
  AND (:after::timestamptz IS NULL OR time >= :after)
  AND (:before::timestamptz IS NULL OR time < :before)
ORDER BY time DESC, id DESC
LIMIT :limit
