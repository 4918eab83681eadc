-- When the next task of :queue becomes due (PENDING retry time or IN_FLIGHT lease end): the
-- head of each status's range in task_live_idx.
SELECT now() AS now,
       LEAST(
           (SELECT min(due_at) FROM {schema}.task WHERE queue = :queue AND status = 'PENDING'),
           (SELECT min(due_at) FROM {schema}.task WHERE queue = :queue AND status = 'IN_FLIGHT')
       ) AS next_due
