-- When the next task of :queue becomes due (PENDING retry time or IN_FLIGHT lease end).
SELECT now() AS now,
       (SELECT min(due_at) FROM {schema}.task
        WHERE queue = :queue AND status IN ('PENDING', 'IN_FLIGHT')) AS next_due
