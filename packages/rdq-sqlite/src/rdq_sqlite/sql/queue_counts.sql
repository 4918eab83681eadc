SELECT queue, status, count(*), min(status_at) FROM task
WHERE queue = :queue
GROUP BY queue, status
