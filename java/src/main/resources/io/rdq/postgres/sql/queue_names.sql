-- The name of every queue holding a task (stats.sql then counts them), from a loose index
-- scan of each status's partial index: one index descent per queue and index, never a scan
-- of the table.
WITH RECURSIVE
live(queue) AS (
    SELECT min(queue) FROM {schema}.task WHERE status IN ('PENDING', 'IN_FLIGHT')
    UNION ALL
    SELECT (SELECT min(t.queue) FROM {schema}.task AS t
            WHERE t.status IN ('PENDING', 'IN_FLIGHT') AND t.queue > l.queue)
    FROM live AS l WHERE l.queue IS NOT NULL
),
dead(queue) AS (
    SELECT min(queue) FROM {schema}.task WHERE status = 'DEAD'
    UNION ALL
    SELECT (SELECT min(t.queue) FROM {schema}.task AS t
            WHERE t.status = 'DEAD' AND t.queue > d.queue)
    FROM dead AS d WHERE d.queue IS NOT NULL
),
succeeded(queue) AS (
    SELECT min(queue) FROM {schema}.task WHERE status = 'SUCCEEDED'
    UNION ALL
    SELECT (SELECT min(t.queue) FROM {schema}.task AS t
            WHERE t.status = 'SUCCEEDED' AND t.queue > s.queue)
    FROM succeeded AS s WHERE s.queue IS NOT NULL
),
cancelled(queue) AS (
    SELECT min(queue) FROM {schema}.task WHERE status = 'CANCELLED'
    UNION ALL
    SELECT (SELECT min(t.queue) FROM {schema}.task AS t
            WHERE t.status = 'CANCELLED' AND t.queue > c.queue)
    FROM cancelled AS c WHERE c.queue IS NOT NULL
),
names AS (
    SELECT queue FROM live WHERE queue IS NOT NULL
    UNION SELECT queue FROM dead WHERE queue IS NOT NULL
    UNION SELECT queue FROM succeeded WHERE queue IS NOT NULL
    UNION SELECT queue FROM cancelled WHERE queue IS NOT NULL
)
SELECT array_agg(queue) AS queues FROM names
