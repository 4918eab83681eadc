-- The highest priority below :below that holds a task of group :grp due or leased (one seek).
SELECT max(priority) FROM task
WHERE queue = :queue AND grp = :grp AND priority < :below
    AND grp IS NOT NULL AND due_at IS NOT NULL
