-- One page of the audit trail, newest first, before a keyset position (the filter's upper
-- bound is folded into it, so the page starts with one seek).
SELECT seq, time, actor, action, queue, selector, count, reason, error FROM audit
WHERE (time, seq) < (:before_at, :before_seq) AND time >= :lo
    AND (:queue IS NULL OR queue = :queue)
    AND (:action IS NULL OR action = :action)
    AND (:actor IS NULL OR actor = :actor)
ORDER BY time DESC, seq DESC
LIMIT :limit
