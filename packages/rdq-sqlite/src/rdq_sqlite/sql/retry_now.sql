-- PENDING tasks not yet due become due now (by id: the unary + keeps the planner on the key).
UPDATE task SET next_attempt_at = :now, held = NULL
WHERE id IN (SELECT value FROM json_each(:ids))
    AND +queue = :queue AND +status = 'PENDING' AND +next_attempt_at > :now
