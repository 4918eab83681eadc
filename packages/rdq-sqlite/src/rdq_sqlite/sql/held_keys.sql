-- The first key after :after under which tasks of the queue are held: one seek of task_held.
SELECT min(held) FROM task WHERE queue = :queue AND held > :after AND due_at IS NOT NULL
