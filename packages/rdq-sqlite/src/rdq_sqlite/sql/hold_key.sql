-- A claim met many due tasks that the control of :key (a task key) holds back: it holds up
-- to :chunk of the queue's due tasks with that key in one statement, the first in claim order
-- first (one range of the claim index per priority): a deep backlog is passed over in
-- a few statements, each keeping the write lock for a bounded time.
UPDATE task SET held = :key
WHERE id IN (
    WITH RECURSIVE priorities(value) AS (
        SELECT 10
        UNION ALL
        SELECT value - 1 FROM priorities WHERE value > -10
    )
    SELECT task.id FROM priorities, task
    WHERE task.queue = :queue AND task.priority = priorities.value AND task.claim_at <= :now
        AND task.keys <> '[]'
        AND EXISTS (
            SELECT 1 FROM json_each(
                CASE WHEN NOT json_valid(task.keys) THEN '[]'
                WHEN json_type(task.keys) = 'array' THEN task.keys
                ELSE '[]' END
            )
            WHERE value = :key
        )
    LIMIT :chunk
)
