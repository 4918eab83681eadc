-- The retention step: delete the listed finished tasks of :queue whose status time is before
-- :before (a task redriven and dead-lettered again since the engine read it is later, and
-- stays; a live task has no status time here, and stays).
DELETE FROM {schema}.task
WHERE queue = :queue AND id = ANY(:ids::text[])
    AND CASE status
        WHEN 'DEAD' THEN dead_lettered_at
        WHEN 'SUCCEEDED' THEN completed_at
        WHEN 'CANCELLED' THEN cancelled_at
    END < :before::timestamptz
