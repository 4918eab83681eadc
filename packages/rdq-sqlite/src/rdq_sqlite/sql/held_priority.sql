-- The highest priority below :below of the tasks held under :key: one seek of task_held.
SELECT priority FROM task
WHERE queue = :queue AND held = :key AND due_at IS NOT NULL AND priority < :below
ORDER BY priority DESC
LIMIT 1
