-- One page of the tasks of a queue in one status, by status time then id, after a keyset
-- position (the filter's lower bound is folded into it, so the page starts with one seek).
SELECT {listed_columns} FROM task
WHERE queue = :queue AND status = :status
    AND (status_at, id) > (:after_at, :after_id) AND status_at < :hi
    AND (:error_type IS NULL OR last_error_type = :error_type)
    AND (:handler_ref IS NULL OR handler_ref = :handler_ref)
ORDER BY status_at, id
LIMIT :limit
