-- When the next task of :queue becomes due: the head of the PENDING range in task_live_idx from
-- the queue's claim floor (migration 0014), or now when a lease has lapsed before it. A lease
-- that lapses later is not looked for: a held xmin horizon keeps the index entries of every
-- lease since resolved in that range, and the waiter's own timeout (a worker's poll_max)
-- ends its wait before long.
WITH pending AS (
    SELECT min(due_at) AS due
    FROM {schema}.task
    WHERE queue = :queue AND status = 'PENDING' AND due_at >= {schema}.claim_floor(:queue)
)
SELECT now() AS now,
       LEAST(
           p.due,
           (SELECT min(due_at) FROM {schema}.task
            WHERE queue = :queue AND status = 'IN_FLIGHT' AND due_at >= {schema}.claim_floor(:queue)
              AND due_at <= LEAST(p.due, now()))
       ) AS next_due
FROM pending AS p
