-- One page of the tasks of a queue in one status, by status time then id, after a keyset
-- position (the first page starts after the lowest one).
SELECT {listed_columns} FROM task
WHERE queue = :queue AND status = :status AND {filter}
    AND (status_at, id) > (:after_at, :after_id)
ORDER BY status_at, id
LIMIT :limit
