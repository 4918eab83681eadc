DELETE FROM task
WHERE id IN (SELECT value FROM json_each(:ids))
    AND +queue = :queue AND +status IN ('DEAD', 'CANCELLED')
