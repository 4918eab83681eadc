-- The retention step: the listed finished tasks of :queue whose status time is before :before
-- (a task redriven and dead-lettered again since the engine read it has a later status_at).
DELETE FROM task
WHERE id IN (SELECT value FROM json_each(:ids))
    AND +queue = :queue
    AND +status IN ('DEAD', 'SUCCEEDED', 'CANCELLED')
    AND +status_at < :before
