-- A claim in a queue's own order: the first group after :after that holds a due or leased
-- task (one seek of task_group).
SELECT min(grp) FROM task
WHERE queue = :queue AND grp > :after AND grp IS NOT NULL AND due_at IS NOT NULL
