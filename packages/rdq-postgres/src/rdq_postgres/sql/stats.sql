-- The stats of the queues :queues (one for stats, every queue for list_queues; an array, so
-- that the planner expects a few of them): per status a count that stops at :stop (the
-- exact-count threshold + 1; each reads at most that many entries of its partial index) and,
-- only when it stopped there, the planner's estimate; and the oldest due PENDING time (read
-- from the queue's claim floor up, migration 0014).
-- (OFFSET 0 keeps the counts a subquery of their own, so each runs once.)
WITH queues AS (SELECT DISTINCT unnest(:queues::text[]) AS queue)
SELECT q.queue, now() AS as_of, c.*,
       CASE WHEN c.pending >= :stop THEN {schema}.estimated_count(q.queue, 'PENDING') END
           AS pending_estimate,
       CASE WHEN c.in_flight >= :stop THEN {schema}.estimated_count(q.queue, 'IN_FLIGHT') END
           AS in_flight_estimate,
       CASE WHEN c.dead >= :stop THEN {schema}.estimated_count(q.queue, 'DEAD') END
           AS dead_estimate,
       CASE WHEN c.succeeded >= :stop THEN {schema}.estimated_count(q.queue, 'SUCCEEDED') END
           AS succeeded_estimate,
       CASE WHEN c.cancelled >= :stop THEN {schema}.estimated_count(q.queue, 'CANCELLED') END
           AS cancelled_estimate
FROM queues AS q
CROSS JOIN LATERAL (
    SELECT
        (SELECT count(*) FROM (
            SELECT FROM {schema}.task WHERE queue = q.queue AND status = 'PENDING' LIMIT :stop
        ) AS s) AS pending,
        (SELECT count(*) FROM (
            SELECT FROM {schema}.task WHERE queue = q.queue AND status = 'IN_FLIGHT' LIMIT :stop
        ) AS s) AS in_flight,
        (SELECT count(*) FROM (
            SELECT FROM {schema}.task WHERE queue = q.queue AND status = 'DEAD' LIMIT :stop
        ) AS s) AS dead,
        (SELECT count(*) FROM (
            SELECT FROM {schema}.task WHERE queue = q.queue AND status = 'SUCCEEDED' LIMIT :stop
        ) AS s) AS succeeded,
        (SELECT count(*) FROM (
            SELECT FROM {schema}.task WHERE queue = q.queue AND status = 'CANCELLED' LIMIT :stop
        ) AS s) AS cancelled,
        (SELECT min(due_at) FROM {schema}.task
         WHERE queue = q.queue AND status = 'PENDING' AND due_at <= now()
           AND due_at >= {schema}.claim_floor(q.queue)) AS oldest_due
    OFFSET 0
) AS c
