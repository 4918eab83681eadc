-- A claim met many due tasks that the control of :key (a task key) holds back: it holds all of
-- the queue's due tasks with that key at once (one pass over the claim index, in SQLite).
UPDATE task SET held = :key
WHERE queue = :queue AND claim_at <= :now AND keys <> '[]'
    AND EXISTS (
        SELECT 1 FROM json_each(
            CASE WHEN NOT json_valid(keys) THEN '[]'
            WHEN json_type(keys) = 'array' THEN keys
            ELSE '[]' END
        )
        WHERE value = :key
    )
