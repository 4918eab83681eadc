DELETE FROM task
WHERE queue = :queue AND status IN ('DEAD', 'CANCELLED')
    AND id IN (SELECT value FROM json_each(:ids))
