-- Give dedup key :key to task :task_id of :queue, held until :until_us (NULL: while it is live).
INSERT INTO dedup (key, task_id, queue, until_us) VALUES (:key, :task_id, :queue, :until_us)
ON CONFLICT (key) DO UPDATE SET
    task_id = excluded.task_id, queue = excluded.queue, until_us = excluded.until_us
