-- Per key of the queue's tasks holding a live lease (IN_FLIGHT, lease after :now): how many,
-- and the earliest of those leases' ends. One range of task_status over the live leases:
-- never the tasks waiting. A keys value that is not a JSON array counts as no keys.
SELECT '*', count(*), min(status_at) FROM task
WHERE queue = :queue AND status = 'IN_FLIGHT' AND status_at > :now
UNION ALL
SELECT 'handler:' || handler_ref, count(*), min(status_at) FROM task
WHERE queue = :queue AND status = 'IN_FLIGHT' AND status_at > :now
GROUP BY handler_ref
UNION ALL
SELECT key.value, count(*), min(task.status_at)
FROM task, json_each(
    CASE WHEN NOT json_valid(task.keys) THEN '[]'
    WHEN json_type(task.keys) = 'array' THEN task.keys
    ELSE '[]' END
) AS key
WHERE task.queue = :queue AND task.status = 'IN_FLIGHT' AND task.status_at > :now
    AND task.keys <> '[]'
GROUP BY key.value
