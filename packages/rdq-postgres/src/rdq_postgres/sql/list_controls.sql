-- The control records of :queue (every queue when NULL; only :key's when :key is not NULL),
-- by queue then key, each with in_use: the tasks with its key that hold a live lease now.
-- control.queue is COLLATE "C" and task.queue the database's default: passed as it is, the
-- function would compare task.queue in "C" and read the task table without its indexes
-- (50-90 ms a control on 10M tasks, against 0.5 ms), so it is passed in the default collation.
SELECT c.queue, c.key, c.paused, c.gate, c.concurrency, c.rate, c.per, c.burst, c.fair,
       c.aging, c.state, c.version, c.updated_at,
       {schema}.live_leases(c.queue COLLATE "default", c.key) AS in_use
FROM {schema}.control AS c
WHERE (:queue::text IS NULL OR c.queue = :queue::text)
  AND (:key::text IS NULL OR c.key = :key::text)
ORDER BY c.queue, c.key
