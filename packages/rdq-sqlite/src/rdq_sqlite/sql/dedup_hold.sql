-- Who holds dedup key :key: the row, and its task's status and created_at (NULL when the task
-- is gone).
SELECT d.task_id, d.queue, d.until_us, t.status, t.created_at
FROM dedup AS d LEFT JOIN task AS t ON t.id = d.task_id
WHERE d.key = :key
