-- Per queue and status: how many tasks, and the earliest status time (for PENDING: the
-- longest-waiting due time).
SELECT queue, status, count(*), min(status_at) FROM task
GROUP BY queue, status
